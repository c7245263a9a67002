"""The processors: consume shard streams into indexed stores and run user handlers.

Horizontally scaled, one owner per shard (built in a later issue).
"""
