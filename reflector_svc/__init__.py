"""The reflector: the only component that lists and watches the Kubernetes API.

One elected leader per resource lists (paged) and watches it, diffs each relist against what
the shards know (inferring the deletions it missed), and publishes the deltas onto the
resource's sharded Redis streams, fenced by its leader epoch.
"""
