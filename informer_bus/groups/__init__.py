"""``informer-bus groups``: the consumer groups of each resource, and removing one nobody runs.

Each consumer group on a resource's shard streams is one application on the watch: a
processor group (``informer-bus processor --group NAME``) or a durable subscriber. Retention
(:mod:`reflector_svc.retention`) keeps every entry the slowest group still needs, so a group
that no longer runs holds its streams' entries until ``--retention-max-entries`` forces a trim:
:mod:`.delete` removes such a group. :mod:`.command` is the subcommand; listing reuses
:mod:`informer_bus.status`.
"""
