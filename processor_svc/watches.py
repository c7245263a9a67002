"""What a controller watches, declared on its class: ``For``, ``Owns`` and ``Watches``.

controller-runtime's builder (``For(&Widget{}).Owns(&ConfigMap{}).Watches(...)``) in Python's
idiom: class attributes that are descriptors, so the declaration is also how the code reads
the cache::

    class WidgetOperator(Controller):
        widgets = For("widgets.example.com", predicates=(generation_changed,))
        config_maps = Owns("configmaps", indexers={"by_app": by_app})
        namespaces = Watches("namespaces", map_to=widgets_in_namespace, replicate=True)

        def reconcile(self, key: str) -> None:
            widget = self.widgets.get_by_key(key)  # the descriptor is that resource's Lister

Why declarations on the class rather than calls in ``__init__``: the processor must know the
resources before it builds any cache (``DeclaresResources``, asked of the class), and the
declarations give each watched resource its mapping from events to queue keys:

* ``For(resource)``: the *primary*; its keys are the queue keys (an event enqueues the
  object's own key).
* ``Owns(resource)``: an event of a child enqueues its *controlling owner's* key, when that
  owner reference names the primary's kind and API group (the primary's reflector records them:
  ``HandlerContext.layouts``). Until that layout is known, a reference is followed only to a
  primary the cache holds with the reference's uid, so a key that is not a primary's is never
  queued; an event whose owner is not cached yet is not followed (the owner's own event, when
  it arrives, queues it anyway). An update that changed the controlling owner queues both
  owners, whatever the predicates (the relationship is what an ``Owns`` watch is about);
  a deletion, tombstones included, queues the last owner.
* ``Watches(resource, map_to)``: ``map_to(controller, obj)`` returns the queue keys; an update
  queues the keys of the old and of the new object (a changed label may move an object from
  one primary to another), a deletion those of the final state.

``predicates`` filter a resource's updates (additions and deletions always pass, as in
:mod:`processor_svc.predicates`); ``indexers`` are added to the resource's lister when the
controller is built, before any shard is attached; ``replicate`` asks for every shard of a
small lookup resource instead of the shards co-sharded with the primary's. Every event of a
watched resource also goes to the controller's write barrier, filtered or not: the cache moved.

Mistakes are one line each, raised when the class is defined (two ``For``, ``Owns`` or
``Watches`` without a ``For``, a resource declared twice) or when it is built (a declared
resource the processor does not serve, an index name taken by another function).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, Self, overload

from common.handlers import ResourceEventHandler
from common.object_keys import DeletedFinalStateUnknown, Obj, deletion_handling_meta_namespace_key
from common.priority_queue import NORMAL_PRIORITY
from common.publication import ResourceLayout
from common.shard_routing import controller_reference, owner_key
from common.store import IndexFunc
from processor_svc.event_priority import add_priority, update_priority
from processor_svc.handlers import HandlerContext, Lister, ResourceUse
from processor_svc.predicates import UpdatePredicate

__all__ = [
    "Binding",
    "Declaration",
    "DeclarationError",
    "Declarations",
    "For",
    "MapFunc",
    "Owns",
    "Watches",
]

MapFunc = Callable[[Any, Obj], Iterable[str]]
"""``map_to(controller, obj) -> queue keys``; a plain function in the class body is a method."""

Observe = Callable[[str, str, Obj | DeletedFinalStateUnknown, bool], None]
"""``observe(resource, object_key, obj, deleted)``: an event reached that resource's cache."""


class DeclarationError(ValueError):
    """A controller's declarations cannot work; the message is one line for a human."""


class _HasContext(Protocol):
    """What a declaration needs of the instance it is read from: the processor's context."""

    @property
    def context(self) -> HandlerContext: ...


class Declaration:
    """A watched resource, declared as a class attribute of a controller (module docstring).

    Read from the class, it is the declaration; read from an instance, it is the resource's
    :class:`~processor_svc.handlers.Lister`.
    """

    __slots__ = ("attribute", "indexers", "predicates", "replicate", "resource")

    def __init__(
        self,
        resource: str,
        *,
        predicates: Iterable[UpdatePredicate] = (),
        indexers: Mapping[str, IndexFunc] | None = None,
        replicate: bool = False,
    ) -> None:
        what = type(self).__name__
        if not isinstance(resource, str) or not resource:
            raise DeclarationError(f"{what}(...) needs a resource id, got {resource!r}")
        self.resource: Final = resource
        self.predicates: Final = tuple(predicates)
        if not all(callable(predicate) for predicate in self.predicates):
            raise DeclarationError(f"{what}({resource!r}): predicates must be callables")
        self.indexers: Final = dict(indexers or {})
        if not all(isinstance(n, str) and callable(f) for n, f in self.indexers.items()):
            raise DeclarationError(f"{what}({resource!r}): indexers must map names to functions")
        self.replicate: Final = bool(replicate)
        self.attribute = ""
        """The class attribute it is bound to, for messages."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.attribute = name

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, instance: _HasContext, owner: type[Any] | None = None) -> Lister: ...

    def __get__(
        self, instance: _HasContext | None, owner: type[Any] | None = None
    ) -> Self | Lister:
        if instance is None:
            return self
        return instance.context.lister_for(self.resource)

    def __set__(self, instance: object, value: object) -> None:
        raise AttributeError(
            f"{self.attribute} is a declared resource: it reads {self.resource!r}'s cache and "
            "cannot be assigned"
        )

    @property
    def use(self) -> ResourceUse:
        """What the processor must serve for it."""
        return ResourceUse(self.resource, self.replicate)

    def handler(self, binding: Binding) -> ResourceEventHandler:
        """The event handler of this resource for the controller ``binding`` describes."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.resource!r})"


class For(Declaration):
    """The primary resource: its keys are the controller's queue keys. The controller itself
    handles its events (its ``predicates`` and the class's apply to updates)."""

    __slots__ = ()

    def __init__(
        self,
        resource: str,
        *,
        predicates: Iterable[UpdatePredicate] = (),
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        super().__init__(resource, predicates=predicates, indexers=indexers)


class Owns(Declaration):
    """A child resource: its events queue the controlling owner's key (module docstring)."""

    __slots__ = ()

    def handler(self, binding: Binding) -> ResourceEventHandler:
        return _OwnerEnqueuer(self, binding)


class Watches(Declaration):
    """Any other resource: ``map_to(controller, obj)`` names the queue keys of an event."""

    __slots__ = ("map_to",)

    def __init__(
        self,
        resource: str,
        map_to: MapFunc,
        *,
        predicates: Iterable[UpdatePredicate] = (),
        indexers: Mapping[str, IndexFunc] | None = None,
        replicate: bool = False,
    ) -> None:
        super().__init__(resource, predicates=predicates, indexers=indexers, replicate=replicate)
        if not callable(map_to):
            raise DeclarationError(f"Watches({resource!r}): map_to must be a function")
        self.map_to: Final = map_to

    def handler(self, binding: Binding) -> ResourceEventHandler:
        return _MappedEnqueuer(self, binding)


@dataclass(frozen=True, slots=True)
class Binding:
    """What a declaration's handler needs of its controller, as plain values and callables."""

    controller: object
    """Passed to ``map_to`` as its first argument."""
    primary: str
    primary_lister: Lister
    layouts: Callable[[str], ResourceLayout | None]
    enqueue: Callable[[str, int], None]
    """Queues a primary key at a priority (:mod:`processor_svc.event_priority`)."""
    observe: Observe


class Declarations:
    """A controller class's declarations: the primary and the others, in class order.

    A plain class, not a dataclass: a field typed as a descriptor would be read through it.
    """

    __slots__ = ("others", "primary")

    def __init__(self, primary: For | None = None, others: tuple[Declaration, ...] = ()) -> None:
        self.primary = primary
        self.others = others

    @classmethod
    def of(cls, owner: type[Any]) -> Declarations:
        """Collect ``owner``'s declarations (inherited ones too; a subclass may override one by
        name); :class:`DeclarationError` for the mistakes the module docstring lists."""
        found: dict[str, Declaration] = {}
        for klass in reversed(owner.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Declaration):
                    found[name] = value
                elif name in found:  # a subclass replaced the declaration with something else
                    del found[name]
        primaries = [d for d in found.values() if isinstance(d, For)]
        others = tuple(d for d in found.values() if not isinstance(d, For))
        where = owner.__qualname__
        if len(primaries) > 1:
            names = ", ".join(f"{d.attribute} = {d!r}" for d in primaries)
            raise DeclarationError(f"{where} declares {len(primaries)} For ({names}): a "
                                   "controller has one primary resource, the others are Owns "
                                   "or Watches")  # fmt: skip
        if others and not primaries:
            raise DeclarationError(
                f"{where}.{others[0].attribute} = {others[0]!r} needs a For: declare the primary "
                f"resource whose keys {where} reconciles"
            )
        seen: dict[str, str] = {}
        for declaration in (*primaries, *others):
            earlier = seen.setdefault(declaration.resource, declaration.attribute)
            if earlier != declaration.attribute:
                raise DeclarationError(
                    f"{where} declares {declaration.resource!r} twice ({earlier} and "
                    f"{declaration.attribute}): one declaration per resource"
                )
        return cls(primaries[0] if primaries else None, others)

    def __bool__(self) -> bool:
        return self.primary is not None

    def all(self) -> tuple[Declaration, ...]:
        """Every declaration, the primary first."""
        return self.others if self.primary is None else (self.primary, *self.others)

    def uses(self) -> tuple[ResourceUse, ...]:
        """What the processor must serve, the primary first (``DeclaresResources``)."""
        return tuple(declaration.use for declaration in self.all())

    def listers(self, context: HandlerContext, where: str) -> dict[str, Lister]:
        """Each declared resource's lister, with the declared indexers added;
        :class:`DeclarationError` when the processor does not serve one, or an index name is
        taken by another function."""
        listers: dict[str, Lister] = {}
        for declaration in self.all():
            try:
                lister = context.lister_for(declaration.resource)
            except KeyError:
                served = ", ".join(sorted(context.all_listers())) or "none"
                raise DeclarationError(
                    f"{where}.{declaration.attribute} = {declaration!r}: this processor does not "
                    f"serve {declaration.resource!r} (it serves {served})"
                ) from None
            _add_indexers(lister, declaration, where)
            listers[declaration.resource] = lister
        return listers


def _add_indexers(lister: Lister, declaration: Declaration, where: str) -> None:
    """Add the declaration's indexers; the same function under the same name (another
    controller of the processor declared it too) is already there."""
    present = lister.get_indexers()
    missing: dict[str, IndexFunc] = {}
    for name, func in declaration.indexers.items():
        if name not in present:
            missing[name] = func
        elif present[name] is not func:
            raise DeclarationError(
                f"{where}.{declaration.attribute}: index {name!r} of {declaration.resource!r} "
                "is already registered with another function"
            )
    lister.add_indexers(missing)


def _final_state(obj: Obj | DeletedFinalStateUnknown) -> Obj | None:
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


def _api_group(api_version: object) -> str | None:
    if not isinstance(api_version, str):
        return None
    group, slash, _ = api_version.rpartition("/")
    return group if slash else ""


@dataclass(frozen=True, slots=True)
class _OwnerKind:
    """What an owner reference must name to be a primary, from the primary's layout."""

    kind: str
    group: str
    namespaced: bool


class _OwnerEnqueuer:
    """An ``Owns`` resource's handler: child events queue the owning primary's key.

    Runs for every child event on the dispatch path, so each event costs one key, one scan of
    the owner references and a string comparison or two; the layout is asked for only until it
    is known.
    """

    __slots__ = (
        "_enqueue",
        "_layouts",
        "_observe",
        "_owner_kind",
        "_predicates",
        "_primary",
        "_primary_lister",
        "_resource",
    )

    def __init__(self, declaration: Owns, binding: Binding) -> None:
        self._resource = declaration.resource
        self._predicates = declaration.predicates
        self._enqueue = binding.enqueue
        self._observe = binding.observe
        self._primary = binding.primary
        self._primary_lister = binding.primary_lister
        self._layouts = binding.layouts
        self._owner_kind: _OwnerKind | None = None

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        key = deletion_handling_meta_namespace_key(obj)
        self._observe(self._resource, key, obj, False)
        owner = self._owner_of(key, obj)
        if owner is not None:
            self._enqueue(owner, add_priority(is_in_initial_list))

    def on_update(self, old: Obj, new: Obj) -> None:
        key = deletion_handling_meta_namespace_key(new)
        self._observe(self._resource, key, new, False)
        owner = self._owner_of(key, new)
        previous = owner if old is new else self._owner_of(key, old)
        if previous != owner:  # re-owned, adopted or released: both owners hear of it
            if previous is not None:
                self._enqueue(previous, NORMAL_PRIORITY)
            if owner is not None:
                self._enqueue(owner, NORMAL_PRIORITY)
        elif owner is not None and all(predicate(old, new) for predicate in self._predicates):
            self._enqueue(owner, update_priority(old, new))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        key = deletion_handling_meta_namespace_key(obj)
        self._observe(self._resource, key, obj, True)
        final = _final_state(obj)
        owner = None if final is None else self._owner_of(key, final)
        if owner is not None:
            self._enqueue(owner, NORMAL_PRIORITY)

    def _owner_of(self, key: str, obj: Obj) -> str | None:
        """The primary key of ``obj``'s controlling owner, or ``None`` (no controlling owner,
        or one that is not a primary)."""
        reference = controller_reference(obj)
        if reference is None:
            return None
        kind = self._owner_kind or self._learn_owner_kind()
        if kind is None:
            return self._cached_owner(key, reference)
        if (
            reference.get("kind") != kind.kind
            or _api_group(reference.get("apiVersion")) != kind.group
        ):
            return None
        return owner_key(key, reference, owner_namespaced=kind.namespaced)

    def _learn_owner_kind(self) -> _OwnerKind | None:
        layout = self._layouts(self._primary)
        if layout is not None:
            self._owner_kind = _OwnerKind(layout.kind, layout.group, layout.namespaced)
        return self._owner_kind

    def _cached_owner(self, key: str, reference: dict[str, Any]) -> str | None:
        """Without the primary's layout: the owner's key if the primary cache holds an object
        there with the reference's uid (uids are unique across kinds), else ``None``."""
        uid = reference.get("uid")
        if not isinstance(uid, str) or not uid:
            return None
        candidates = {owner_key(key, reference), owner_key(key, reference, owner_namespaced=False)}
        for candidate in candidates:
            cached = self._primary_lister.get_by_key(candidate)
            metadata = None if cached is None else cached.get("metadata")
            if isinstance(metadata, dict) and metadata.get("uid") == uid:
                return candidate
        return None


class _MappedEnqueuer:
    """A ``Watches`` resource's handler: ``map_to`` names the keys of each event."""

    __slots__ = ("_controller", "_enqueue", "_map", "_observe", "_predicates", "_resource")

    def __init__(self, declaration: Watches, binding: Binding) -> None:
        self._resource = declaration.resource
        self._predicates = declaration.predicates
        self._map = declaration.map_to
        self._controller = binding.controller
        self._enqueue = binding.enqueue
        self._observe = binding.observe

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self._observe(self._resource, deletion_handling_meta_namespace_key(obj), obj, False)
        priority = add_priority(is_in_initial_list)
        for key in self._map(self._controller, obj):
            self._enqueue(key, priority)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._observe(self._resource, deletion_handling_meta_namespace_key(new), new, False)
        if not all(predicate(old, new) for predicate in self._predicates):
            return
        priority = update_priority(old, new)
        for key in self._map(self._controller, new):
            self._enqueue(key, priority)
        if old is not new:  # the queue coalesces keys both name
            for key in self._map(self._controller, old):
                self._enqueue(key, priority)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._observe(self._resource, deletion_handling_meta_namespace_key(obj), obj, True)
        final = _final_state(obj)
        if final is not None:
            for key in self._map(self._controller, final):
                self._enqueue(key, NORMAL_PRIORITY)
