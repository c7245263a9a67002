"""The reflector: the only component that lists and watches the Kubernetes API.

It publishes deltas onto sharded Redis streams (built in a later issue).
"""
