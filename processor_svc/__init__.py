"""The processors: consume shard streams into indexed stores and run user handlers.

Horizontally scaled: each shard is owned by one processor at a time (a fenced lease), which
applies its deltas in order to the shard's store and fans them out to handlers and controllers.
"""
