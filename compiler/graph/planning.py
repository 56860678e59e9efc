"""Device planning: complete a partial device annotation (after TVM's PlanDevices).

The input may say where things run with ``on_device(e, device)``, ``device_copy(e, src,
dst)``, parameter devices, let-bound variable devices and the function's result device.
:func:`plan_devices` gives every sub-expression one device and inserts ``device_copy``
exactly where data crosses from one device to another; ``on_device`` annotations are
gone from its result. The rules:

* an operator call runs where its call-arguments run (their devices are unified);
  ``device_copy(e, src, dst)`` puts ``e`` on ``src`` and itself on ``dst``;
  ``on_device(e, d)`` puts ``e`` on ``d``;
* variables (parameters, let-bound), constants and ``on_device`` results are values
  that live somewhere: a call on another device reads them through an inserted copy
  (constants are simply made on the device that reads them); a let-bound variable
  lives where its value is computed;
* calls that nothing places run on the default device (the cpu); an unannotated
  parameter lives where its readers run when they agree, else on the default device;
* two annotations that put one sub-expression on two devices raise
  :class:`DevicePlanningError` naming both annotations and both devices.

The result is the *complete* representation: every node's ``virtual_device`` is set.
Its text form (the *compact* form) shows only the devices of parameters, let-bound
variables, the result and the copies; :func:`expand_devices` (the same planning) gives
the complete representation back. Planning a complete program changes nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .device import CPU, VirtualDevice
from .infer import infer_types
from .ir import (
    Call,
    Constant,
    Expr,
    Function,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    free_variable_error,
    post_order,
)
from .types import GraphError


class DevicePlanningError(GraphError):
    """Contradictory device annotations; names both sub-expressions and both devices."""


def short(expr: Expr) -> str:
    """A short description of an expression for messages (one level of arguments)."""
    def name(e: Expr) -> str:
        if isinstance(e, Var):
            return f"%{e.name}"
        if isinstance(e, Constant):
            return f"constant{tuple(e.data.shape)}"
        if isinstance(e, Call):
            return f"{e.op}(...)"
        return type(e).__name__
    if isinstance(expr, Call):
        attrs = [f"{k}={v}" for k, v in expr.attrs.items() if isinstance(v, VirtualDevice)]
        return f"{expr.op}({', '.join([name(a) for a in expr.args] + attrs)})"
    if isinstance(expr, Var):
        return f"%{expr.name}"
    return name(expr)


@dataclass
class _Anchor:
    device: VirtualDevice
    why: str


class _Domains:
    """Union-find of device domains; each root may be anchored to a device."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.anchor: dict[int, _Anchor] = {}

    def find(self, k: int) -> int:
        self.parent.setdefault(k, k)
        root = k
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[k] != root:
            self.parent[k], k = root, self.parent[k]
        return root

    def fix(self, k: int, device: VirtualDevice, why: str) -> None:
        r = self.find(k)
        have = self.anchor.get(r)
        if have is None:
            self.anchor[r] = _Anchor(device, why)
        elif have.device != device:
            raise DevicePlanningError(
                f"contradictory devices: {have.why} is on {have.device}, but {why} is on "
                f"{device}, and the two must be on one device")

    def unify(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        anchor_b = self.anchor.pop(rb, None)
        self.parent[rb] = ra
        if anchor_b is not None:
            self.fix(ra, anchor_b.device, anchor_b.why)

    def device(self, k: int, default: VirtualDevice) -> VirtualDevice:
        a = self.anchor.get(self.find(k))
        return a.device if a is not None else default


def _is_source(e: Expr) -> bool:
    """Values that live somewhere and may be read from another device."""
    return isinstance(e, Var | Constant) or (isinstance(e, Call) and e.op == "on_device")


def plan_devices(fn: Function, default: VirtualDevice = CPU) -> Function:
    """The complete device representation of ``fn`` (see the module docstring).

    Raises
    ------
    DevicePlanningError
        Two annotations put one sub-expression on two devices.
    """
    infer_types(fn)
    return _Planner(fn, default).run()


def expand_devices(fn: Function, default: VirtualDevice = CPU) -> Function:
    """The complete representation of a program in compact form (e.g. parsed from its
    text): every sub-expression's device, derived from the devices the text shows."""
    return plan_devices(fn, default)


class _Planner:
    def __init__(self, fn: Function, default: VirtualDevice) -> None:
        self.fn = fn
        self.default = default
        self.dom = _Domains()
        self.nodes = list(post_order(fn))
        self.let_of_var = {id(n.var): n for n in self.nodes if isinstance(n, Let)}
        self.params = {id(p) for p in fn.params}
        self.param_fixed: dict[int, _Anchor] = {}
        self.readers: dict[int, list[int]] = {}  # param id -> domains that read it

    # ------------------------------------------------------------------ constraints
    def source_domain(self, src: Expr) -> int | None:
        """Domain of a let-bound var (its value's), else None (its own device)."""
        if isinstance(src, Var) and id(src) in self.let_of_var:
            value = self.let_of_var[id(src)].value
            return id(value) if not _is_source(value) else None
        return None

    def fix_param(self, v: Var, device: VirtualDevice, why: str) -> None:
        have = self.param_fixed.get(id(v))
        if have is None:
            self.param_fixed[id(v)] = _Anchor(device, why)
        elif have.device != device:
            raise DevicePlanningError(
                f"contradictory devices: {have.why} is on {have.device}, but {why} is on "
                f"{device}, and the two must be on one device")

    def read(self, src: Expr, consumer: int) -> None:
        """``consumer``'s domain reads the source ``src`` (a copy may be inserted)."""
        if isinstance(src, Var) and id(src) in self.params:
            self.readers.setdefault(id(src), []).append(consumer)

    def hard(self, src: Expr, device: VirtualDevice, why: str) -> None:
        """``src`` must itself be on ``device`` (no copy)."""
        if isinstance(src, Var) and id(src) in self.params:
            self.fix_param(src, device, why)
        elif isinstance(src, Var):
            k = self.source_domain(src)
            if k is not None:
                self.dom.fix(k, device, why)
            else:
                self.hard(self.let_of_var[id(src)].value, device, why)
        elif isinstance(src, Call):  # on_device: its annotated device must agree
            have = src.attrs["device"]
            if have != device:
                raise DevicePlanningError(
                    f"contradictory devices: {short(src)} is on {have}, but {why} is on "
                    f"{device}, and the two must be on one device")
        # constants are made wherever they are needed

    def constrain(self) -> None:
        d = self.dom
        for p in self.fn.params:
            if p.virtual_device is not None:
                self.fix_param(p, p.virtual_device, f"parameter %{p.name}")
        for e in self.nodes:
            k = id(e)
            d.find(k)
            if e.virtual_device is not None and not isinstance(e, Var | Constant | Function):
                d.fix(k, e.virtual_device, short(e))
            if isinstance(e, Call) and e.op == "on_device":
                dev = e.attrs["device"]
                body = e.args[0]
                why = short(e)
                if _is_source(body):
                    self.hard(body, dev, why)
                else:
                    d.fix(id(body), dev, why)
            elif isinstance(e, Call) and e.op == "device_copy":
                src, dst = e.attrs["src_device"], e.attrs["dst_device"]
                arg = e.args[0]
                why = short(e)
                if _is_source(arg):
                    self.hard(arg, src, f"the source of {why}")
                else:
                    d.fix(id(arg), src, f"the source of {why}")
                d.fix(k, dst, why)
            elif isinstance(e, Call | Tuple | TupleGetItem):
                args = e.args if isinstance(e, Call) else (
                    e.fields if isinstance(e, Tuple) else (e.tuple_value,))
                for a in args:
                    if _is_source(a):
                        self.read(a, k)
                    else:
                        d.unify(k, id(a))
            elif isinstance(e, Let):
                v = e.var
                if _is_source(e.value):
                    if v.virtual_device is not None:
                        self.read(e.value, k)  # value read into the var's device
                elif v.virtual_device is not None:
                    d.fix(id(e.value), v.virtual_device, f"let %{v.name}")
                body_domain = self.source_domain(e.body)
                if body_domain is not None:  # a let-bound variable: where its value is
                    d.unify(k, body_domain)
                elif _is_source(e.body):
                    self.read(e.body, k)
                else:
                    d.unify(k, id(e.body))
            elif (isinstance(e, Function) and e is self.fn and e.result_device is not None
                  and not _is_source(e.body)):
                d.fix(id(e.body), e.result_device, "the function result")

    # -------------------------------------------------------------------- devices
    def param_device(self, p: Var) -> VirtualDevice:
        fixed = self.param_fixed.get(id(p))
        if fixed is not None:
            return fixed.device
        seen = Counter(self.dom.device(r, self.default) for r in self.readers.get(id(p), []))
        return next(iter(seen)) if len(seen) == 1 else self.default

    def source_device(self, src: Expr, new: dict[int, Expr]) -> VirtualDevice | None:
        """Device where ``src`` lives (None for constants: made where needed)."""
        if isinstance(src, Constant):
            return src.virtual_device
        if isinstance(src, Call):
            return src.attrs["device"]
        return new[id(src)].virtual_device

    # -------------------------------------------------------------------- rewrite
    def run(self) -> Function:
        self.constrain()
        new: dict[int, Expr] = {}
        copies: dict[tuple[int, VirtualDevice], Expr] = {}
        dev_of = lambda k: self.dom.device(k, self.default)  # noqa: E731

        for p in self.fn.params:
            new[id(p)] = Var(p.name, p.type_annotation, self.param_device(p))

        def use(src: Expr, device: VirtualDevice) -> Expr:
            """``src`` as read on ``device`` (through a copy when it lives elsewhere)."""
            if isinstance(src, Constant):
                key = (id(src), device)
                if key not in copies:
                    copies[key] = Constant(src.data, device)
                return copies[key]
            value = new[id(src)]
            have = value.virtual_device
            if have == device:
                return value
            key = (id(src), device)
            if key not in copies:
                copies[key] = Call("device_copy", [value],
                                   {"src_device": have, "dst_device": device}, device)
            return copies[key]

        def arg(a: Expr, device: VirtualDevice) -> Expr:
            return use(a, device) if _is_source(a) else new[id(a)]

        for e in self.nodes:
            k = id(e)
            if k in new or e is self.fn:
                continue
            if isinstance(e, Var):
                let = self.let_of_var.get(k)
                if let is None:
                    raise free_variable_error(e, DevicePlanningError)
                if _is_source(let.value):
                    dev = e.virtual_device or self.source_device(let.value, new) \
                        or dev_of(id(let))
                else:
                    dev = dev_of(id(let.value))
                new[k] = Var(e.name, e.type_annotation, dev)
            elif isinstance(e, Constant):
                continue  # made per reading device by use()
            elif isinstance(e, Call) and e.op == "on_device":
                body = e.args[0]
                dev = e.attrs["device"]
                new[k] = use(body, dev) if _is_source(body) else new[id(body)]
            elif isinstance(e, Call) and e.op == "device_copy":
                src = e.attrs["src_device"]
                new[k] = Call("device_copy", [arg(e.args[0], src)], e.attrs, dev_of(k))
            elif isinstance(e, Call):
                dev = dev_of(k)
                new[k] = Call(e.op, [arg(a, dev) for a in e.args], e.attrs, dev, e.name)
            elif isinstance(e, Tuple):
                dev = dev_of(k)
                new[k] = Tuple([arg(f, dev) for f in e.fields], dev)
            elif isinstance(e, TupleGetItem):
                dev = dev_of(k)
                new[k] = TupleGetItem(arg(e.tuple_value, dev), e.index, dev)
            elif isinstance(e, Let):
                var = new[id(e.var)]
                value = use(e.value, var.virtual_device) if _is_source(e.value) \
                    else new[id(e.value)]
                body = use(e.body, dev_of(k)) if _is_source(e.body) else new[id(e.body)]
                new[k] = Let(var, value, body, dev_of(k))
            elif isinstance(e, Function):
                raise DevicePlanningError("nested functions are not planned")
        body = self.fn.body
        if _is_source(body):
            want = self.fn.result_device
            if want is None:
                want = (self.source_device(body, new) if not isinstance(body, Constant)
                        else None) or self.default
            out = use(body, want)
        else:
            out = new[id(body)]
        params = [new[id(p)] for p in self.fn.params]
        result = Function(params, out, self.fn.ret_type, out.virtual_device)
        infer_types(result)
        return result
