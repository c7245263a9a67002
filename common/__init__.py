"""What the reflector and the processors share; it imports neither service nor the app.

Two layers (``pyproject.toml``'s import-linter contracts hold them apart):

* the informer core, pure: object keys, deltas, the indexed store, handlers, the workqueue and
  its rate limiters, key -> shard, the wire envelope and the Redis layout's names. None of it
  talks to Redis or Kubernetes, so every process (and tests without sockets) can use it alone;
* the Redis side: connection settings and clients, leases and leader election, the
  publication marker, and the service plumbing (settings, observability, signal handling).
"""
