"""Where each object of a resource lives now: key -> the shard that knows it, at which version.

A resource sharded by its objects' keys keeps every object on the one shard its key hashes to,
so a key alone says where the object is. Sharded by anything the object says (its controlling
owner, a label: :mod:`common.shard_routing`), the shard is a function of the object's *state*, and
a new owner or a relabel sends the object to another shard: a *move*, whose outgoing half goes
to the shard that knows the key and whose incoming half goes to the shard the new state maps
to (:mod:`reflector_svc.moves`). The publisher therefore has to know, for every key, which
shard knows it.

That knowledge is derived state, never a second source of truth: it is what the shards'
``versions`` hashes say, read whenever the reflector reads where to resume (after it starts
leading and after every failed Redis call: Redis may have lost or kept anything) and with
every relist's known versions, then kept current from what each publish really wrote (a
skipped delta changes nothing). A single leader writes the shards, so between two reads
nothing else moves a key.

With the version each shard knows, because after a crash the shards need not agree: each one
holds its own stream's prefix, and one sub-batch's calls on two shards may have run on one and
not the other (a key deleted from one shard and created again on another, say). For a while a
key can then be known by two shards, one of them at a version the replay has not reached yet;
the version tells which copy an event's halves concern (:mod:`reflector_svc.moves`).

Beside it, the moves whose incoming half may be missing (the shards' ``moving`` hashes,
:attr:`common.redis_layout.ShardKeys.moving`): a crash between a move's two halves leaves the
key known by no shard (or only at a later version), and only this says which outgoing half the
replayed event completes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from common.redis_layout.publish_scripts import parse_moving
from common.redis_replies import as_text

__all__ = ["Copy", "PendingMove", "Placement"]


class Copy(NamedTuple):
    """A shard that knows a key, and the version it knows."""

    shard: int
    version: str


class PendingMove(NamedTuple):
    """An outgoing half on ``from_shard`` (stream id ``stream_id``) for the event at ``rv``,
    whose incoming half on ``to_shard`` may not be written."""

    from_shard: int
    to_shard: int
    stream_id: str
    rv: str


class Placement:
    """key -> the shards that know it (one, but for a crash's leftovers), and the moves that may
    be half written.

    Not thread-safe: the publishing thread updates it, and the reflector's thread replaces it
    (reading the resume point or the known versions) only while nothing is being published.
    The one reader besides (a relist asking whether an unchanged object is misplaced, while its
    earlier chunks are published) asks about a key no chunk in flight holds (a list names each
    key once), and a single dict read or write is atomic under the GIL.
    """

    __slots__ = ("_copies", "loaded", "pending")

    def __init__(self) -> None:
        self._copies: dict[str, tuple[Copy, ...]] = {}
        self.pending: dict[tuple[str, str], PendingMove] = {}
        """(key, rv) -> the move of the key by the event at rv whose incoming half may be
        missing (see the module). A key may have several: entries stay until a checkpoint
        covers them, and a key can move out of more than one shard meanwhile."""
        self.loaded = False
        """Read from Redis at least once (before that it knows nothing, not "no keys")."""

    def __len__(self) -> int:
        return len(self._copies)

    def copies(self, key: str) -> tuple[Copy, ...]:
        """The shards that know ``key``; ``()`` when none does."""
        return self._copies.get(key, ())

    def get(self, key: str) -> int | None:
        """The shard that knows ``key`` (the one with the last copy written, should there be
        more); ``None`` when none does."""
        copies = self._copies.get(key)
        return None if not copies else copies[-1].shard

    def reload(
        self,
        versions: Iterable[Mapping[bytes | str, bytes | str]],
        moving: Iterable[Mapping[bytes | str, bytes | str]],
    ) -> None:
        """Replace everything with what Redis holds: ``versions[s]`` shard ``s``'s ``versions``
        hash, ``moving[s]`` its ``moving`` hash."""
        copies: dict[str, tuple[Copy, ...]] = {}
        for shard, known in enumerate(versions):
            for key, version in known.items():
                name = as_text(key)
                copies[name] = (*copies.get(name, ()), Copy(shard, as_text(version)))
        self._copies = copies
        self.load_pending(moving)
        self.loaded = True

    def load_pending(self, moving: Iterable[Mapping[bytes | str, bytes | str]]) -> None:
        """Replace the pending moves with the shards' ``moving`` hashes (``moving[s]`` is shard
        ``s``'s); an entry that is not one is ignored (nothing but the script writes there)."""
        pending: dict[tuple[str, str], PendingMove] = {}
        for shard, entries in enumerate(moving):
            for key, value in entries.items():
                parsed = parse_moving(as_text(value))
                if parsed is not None:
                    to_shard, stream_id, rv = parsed
                    pending[as_text(key), rv] = PendingMove(shard, to_shard, stream_id, rv)
        self.pending = pending

    def written(self, key: str, shard: int, version: str | None) -> None:
        """A publish wrote an upsert of ``key`` at ``version`` on ``shard`` (``None``: a
        deletion, the shard no longer knows it)."""
        copies = self._copies.get(key, ())
        if not copies or (len(copies) == 1 and copies[0].shard == shard):  # the usual cases
            if version is not None:
                self._copies[key] = (Copy(shard, version),)
            elif copies:
                del self._copies[key]
            return
        others = tuple(copy for copy in copies if copy.shard != shard)
        if version is not None:
            self._copies[key] = (*others, Copy(shard, version))
        elif others:
            self._copies[key] = others
        else:
            self._copies.pop(key, None)

    def completes(self, key: str, rv: str, to_shard: int) -> PendingMove | None:
        """The pending move an upsert of ``key`` at ``rv`` onto ``to_shard`` is the incoming
        half of, removed from the pending ones; ``None`` when it is none.

        Only the very event that moved the key matches (same RV, same destination): a replay
        of it after a crash between the halves. A later re-creation of the key is no move,
        however the last one ended.
        """
        move = self.pending.get((key, rv))
        if move is None or move.to_shard != to_shard:
            return None
        del self.pending[key, rv]
        return move
