"""Training from Python over kiln's trainer (kiln_trainer_* in include/kiln.h;
docs/TRAINING.md): the forward pass, the loss, the backward graph and the
optimizer's update as one graph compiled for the device, as `kiln train`
runs it.

    with kiln.Trainer("mlp.onnx", loss="cross_entropy", optimizer="adamw", lr=3e-3) as t:
        t.fit((X, y), epochs=10, batch_size=32, eval=(Xt, yt))
        t.export("trained.onnx")

`fit` draws the same batches as `kiln train --shuffle SEED` (its
Fisher-Yates order per epoch), so a run's per-step losses equal the CLI's.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import time
from ctypes import c_double, c_int64, c_void_p
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from ._closeable import Closeable
from . import _capi as C
from . import _proto
from ._errors import InvalidArgument, NotFound, OutOfRange, check
from ._tensor import _Handle, _new_from_array
from ._tools import InputTensors, ModelHandle, _device_arg

LOSSES = {"mse": 0, "l1": 1, "cross_entropy": 2, "nll": 3, "bce_with_logits": 4}
OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2}
SCHEDULES = {None: 0, "constant": 0, "step": 1, "cosine": 2, "warmup": 3}
_FLOAT_DTYPES = {C.DTYPE_F32, C.DTYPE_F16, C.DTYPE_F64, C.DTYPE_BF16}
_CLASS_LOSSES = ("cross_entropy", "nll")

Inputs = Union[np.ndarray, Mapping[str, Any]]

# Characters POSIX extended regular expressions give a meaning to.
_ERE_SPECIAL = set("\\^$.[]|()*+?{}")


def ere_escape(name: str) -> str:
    """`name` as a POSIX extended regular expression matching it literally."""
    return "".join("\\" + ch if ch in _ERE_SPECIAL else ch for ch in name)


def freeze_pattern(frozen: Sequence[str]) -> Optional[str]:
    """A POSIX ERE (regexec: search) matching exactly the names in `frozen`:
    anchored alternatives, each escaped. None for no name."""
    if not frozen:
        return None
    return "^(" + "|".join(ere_escape(n) for n in frozen) + ")$"


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """`kiln train --shuffle SEED`'s order of n samples in epoch `epoch`
    (0-based): a Fisher-Yates shuffle driven by xorshift64 from
    seed * 0x9e3779b97f4a7c15 + epoch * 0xbf58476d1ce4e5b9 + 1
    (src/cli/cmd_train.c, epoch_order)."""
    m = (1 << 64) - 1
    order = list(range(n))
    s = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + 1) & m
    for i in range(n - 1, 0, -1):
        s ^= (s << 13) & m
        s ^= s >> 7
        s ^= (s << 17) & m
        j = s % (i + 1)
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, dtype=np.int64)


class _JitSync:
    """KILN_JIT=sync (unless the environment sets KILN_JIT) while the trainer
    may build a plan, as `kiln train` does: with tiered compilation the
    step at which compiled kernels replace the precompiled ones would
    change the rounding from run to run. Restored afterwards, so sessions
    keep their tiered start-up. Process-wide while it lasts: a session
    created by another thread meanwhile compiles synchronously too."""

    def __enter__(self) -> None:
        self.set = "KILN_JIT" not in os.environ
        if self.set:
            os.environ["KILN_JIT"] = "sync"

    def __exit__(self, *exc: Any) -> None:
        if self.set:
            os.environ.pop("KILN_JIT", None)


class Trainer(Closeable):
    """A kiln trainer of `model` (a path, bytes or an onnx.ModelProto).

    loss: "mse", "l1", "cross_entropy" (logits [N, C, d...], int64 classes
    [N, d...]), "nll", "bce_with_logits"; on graph output `output` (default
    the first); ignore_index and label_smoothing for cross_entropy.
    optimizer: "sgd" (momentum, nesterov), "adam" or "adamw", with lr,
    weight_decay (None: the optimizer's default, 0; AdamW 0.01), betas, eps.
    schedule: None/"constant", "step" (step_every, gamma), "cosine"
    (total_steps), "warmup" (warmup_steps), or `kiln train`'s strings
    "step:EVERY:GAMMA", "warmup:STEPS". A step is one optimizer update:
    grad_accum micro-batches; clip_norm > 0 clips the global gradient norm.
    trainable: None (every float initializer the loss depends on), a list
    of initializer names, or a regular expression (Python `re`, searched
    in each name, as the C API's freeze pattern is); freeze: a POSIX ERE of
    names to keep fixed (the C API's own; not with `trainable`).
    seed: the generator of Dropout's masks (and fit's shuffle).
    Not thread-safe: one thread at a time, as kiln_trainer."""

    def __init__(self, model: Any, loss: str = "cross_entropy", optimizer: str = "sgd", lr: float = 0.01, *,
                 device: Optional[str] = None, providers: Optional[Sequence[Any]] = None, output: Optional[str] = None,
                 ignore_index: Optional[int] = None, label_smoothing: float = 0.0, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: Optional[float] = None, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, schedule: Optional[str] = None, step_every: int = 0, gamma: float = 0.1,
                 warmup_steps: int = 0, total_steps: int = 0, grad_accum: int = 1, clip_norm: float = 0.0,
                 trainable: Union[None, str, Sequence[str]] = None, freeze: Optional[str] = None, threads: int = 0,
                 seed: int = 0):
        self._lib = C.lib()
        self._ptr: Optional[int] = None
        if loss not in LOSSES:
            raise InvalidArgument(f"loss '{loss}': expected one of {', '.join(LOSSES)}")
        if optimizer not in OPTIMIZERS:
            raise InvalidArgument(f"optimizer '{optimizer}': expected one of {', '.join(OPTIMIZERS)}")
        if schedule is not None and ":" in schedule:
            schedule, step_every, gamma, warmup_steps = _parse_schedule(schedule, step_every, gamma, warmup_steps)
        if schedule not in SCHEDULES:
            raise InvalidArgument(f"schedule '{schedule}': expected None, constant, step, cosine or warmup")
        if schedule == "step" and (step_every < 1 or gamma <= 0):
            raise InvalidArgument(f"schedule 'step' needs step_every >= 1 and gamma > 0 (got {step_every}, {gamma})")
        if schedule == "warmup" and warmup_steps < 1:
            raise InvalidArgument(f"schedule 'warmup' needs warmup_steps >= 1 (got {warmup_steps})")
        if schedule == "cosine" and total_steps < 1:
            raise InvalidArgument("schedule 'cosine' needs total_steps >= 1 (the updates of the whole run)")
        if not lr > 0:
            raise InvalidArgument(f"lr must be > 0, got {lr}")
        if grad_accum < 1:
            raise InvalidArgument(f"grad_accum must be >= 1, got {grad_accum}")
        if threads < 0:
            raise InvalidArgument(f"threads must be >= 0, got {threads}")
        if trainable is not None and freeze is not None:
            raise InvalidArgument("give trainable or freeze, not both")
        self.loss = loss
        self.optimizer = optimizer
        self.seed = int(seed)
        self.grad_accum = int(grad_accum)
        self._ignore_index = ignore_index
        dev = _device_arg(device, providers)
        self._model = ModelHandle(model)
        try:
            data = self._model.read_bytes()
            self.initializers = {i.name: i for i in _proto.initializers(data)}
            # BatchNormalization's running mean and variance: state the step updates, never trained.
            self._running_stats = {ins[k] for op, ins in _proto.nodes(data) if op == "BatchNormalization"
                                   for k in (3, 4) if k < len(ins)}
            # An initializer that is also a graph input (a default the caller may override) is not trained.
            self._overridable = set(_proto.input_names(data)) & set(self.initializers)
            self._graph_inputs = [n for n in self._model.inputs if n not in self.initializers]
            if output is not None and output not in self._model.outputs:
                raise NotFound(f"output '{output}': the model has no such output "
                               f"(outputs: {', '.join(self._model.outputs)})")
            self.output = output or (self._model.outputs[0] if self._model.outputs else None)
            self.requested_trainable, freeze = self._resolve_trainable(trainable, freeze)
            self.freeze = freeze
            o = self._lib.kiln_trainer_options_default()
            o.loss = LOSSES[loss]
            self._keep = [output.encode() if output else None, freeze.encode() if freeze else None,
                          dev.encode() if dev else None]
            o.output, o.freeze, o.device = self._keep
            if ignore_index is not None:
                o.has_ignore_index, o.ignore_index = 1, int(ignore_index)
            o.label_smoothing = float(label_smoothing)
            o.optimizer = OPTIMIZERS[optimizer]
            o.lr, o.momentum, o.nesterov = float(lr), float(momentum), 1 if nesterov else 0
            o.weight_decay = -1.0 if weight_decay is None else float(weight_decay)
            o.beta1, o.beta2, o.eps = float(betas[0]), float(betas[1]), float(eps)
            o.schedule = SCHEDULES[schedule]
            o.step_every, o.gamma = int(step_every), float(gamma)
            o.warmup_steps, o.total_steps = int(warmup_steps), int(total_steps)
            o.grad_accum, o.clip_norm = int(grad_accum), float(clip_norm)
            o.threads, o.seed = int(threads), self.seed
            out = c_void_p()
            check(self._lib.kiln_trainer_create(self._model.ptr, ctypes.byref(o), ctypes.byref(out)))
            self._ptr = out.value
            self._model.close()  # the trainer copied what it needs; the names and shapes stay
            self._model.data = None
        except BaseException:
            self.close()
            raise

    def _resolve_trainable(self, trainable: Union[None, str, Sequence[str]], freeze: Optional[str]
                           ) -> tuple[Optional[list[str]], Optional[str]]:
        """(the float initializers asked to train, or None for all; the
        freeze pattern passing exactly those to the C trainer)."""
        if trainable is None:
            return None, freeze
        floats = [n for n, i in self.initializers.items() if i.dtype in _FLOAT_DTYPES]
        if isinstance(trainable, str):
            try:
                rx = re.compile(trainable)
            except re.error as e:
                raise InvalidArgument(f"trainable pattern '{trainable}': {e}") from None
            chosen = [n for n in floats if rx.search(n) and n not in self._running_stats and n not in self._overridable]
            if not chosen:
                raise NotFound(f"trainable pattern '{trainable}' matches no float initializer "
                               f"(float initializers: {', '.join(floats) or 'none'})")
        else:
            chosen = []
            for n in trainable:
                if not isinstance(n, str):
                    raise InvalidArgument(f"trainable: expected initializer names (str), got {n!r}")
                if n not in self.initializers:
                    raise NotFound(f"trainable '{n}' is not an initializer of the model "
                                   f"(initializers: {', '.join(self.initializers) or 'none'})")
                if n not in floats:
                    raise InvalidArgument(f"trainable '{n}' is a {C_DTYPE_NAME(self.initializers[n].dtype)} "
                                          f"initializer; only float ones train")
                if n in self._overridable:
                    raise InvalidArgument(f"trainable '{n}' is also a graph input (a default the caller may "
                                          f"override): kiln trains only initializers that are not inputs")
                if n in self._running_stats:
                    raise InvalidArgument(f"trainable '{n}' is a running statistic of BatchNormalization: state "
                                          f"the step updates, not a trained value")
                if n not in chosen:
                    chosen.append(n)
        want = set(chosen)
        frozen = [n for n in floats if n not in want]
        pattern = freeze_pattern(frozen)
        # The pattern as the C trainer will apply it (regexec: a search),
        # checked here with Python's re over every float initializer: it
        # must keep exactly the asked ones trainable.
        if pattern is not None:
            rx = re.compile(pattern)
            kept = {n for n in floats if not rx.search(n)}
            if kept != want:
                raise InvalidArgument(f"internal: freeze pattern {pattern!r} keeps {sorted(kept)}, asked {sorted(want)}")
        return chosen, pattern

    # -- state
    def _require_open(self) -> int:
        if self._ptr is None:
            raise InvalidArgument("the trainer is closed")
        return self._ptr

    @property
    def updates(self) -> int:
        """Optimizer updates done so far."""
        return int(self._lib.kiln_trainer_updates(self._require_open()))

    @property
    def micro_batches(self) -> int:
        """Micro-batches stepped so far (updates x grad_accum, plus those accumulating)."""
        return int(self._lib.kiln_trainer_micro_batches(self._require_open()))

    @property
    def lr(self) -> float:
        """The learning rate of the next update (after the schedule)."""
        return float(self._lib.kiln_trainer_lr(self._require_open()))

    @property
    def input_names(self) -> list[str]:
        """The graph inputs a batch feeds (those without an initializer)."""
        return list(self._graph_inputs)

    # -- batches
    def _feed(self, inputs: Inputs) -> dict[str, Any]:
        if isinstance(inputs, Mapping) and list(inputs) != [""]:
            return dict(inputs)
        if isinstance(inputs, Mapping):
            inputs = inputs[""]
        if len(self._graph_inputs) != 1:
            raise InvalidArgument(f"the model has {len(self._graph_inputs)} inputs "
                                  f"({', '.join(self._graph_inputs)}): pass a dict of name -> array")
        return {self._graph_inputs[0]: inputs}

    def _targets(self, targets: Any, n: Optional[int]) -> _Handle:
        arr = np.asarray(targets)
        if self.loss in _CLASS_LOSSES:
            if arr.dtype not in (np.int64, np.int32):
                raise InvalidArgument(f"targets: {self.loss} takes int64 class indices [N, d...], got a numpy array "
                                      f"of dtype {arr.dtype} and shape {arr.shape}")
            kd = C.DTYPE_I64 if arr.dtype == np.int64 else C.DTYPE_I32
        else:
            if arr.dtype not in (np.float32, np.float64, np.float16):
                raise InvalidArgument(f"targets: {self.loss} takes float targets shaped like output "
                                      f"'{self.output}', got a numpy array of dtype {arr.dtype}")
            arr = arr.astype(np.float32, copy=False)
            kd = C.DTYPE_F32
        if arr.ndim < 1:
            raise InvalidArgument("targets: a scalar; axis 0 must be the batch (shape [N, ...])")
        if n is not None and arr.shape[0] != n:
            raise InvalidArgument(f"targets: {arr.shape[0]} samples (shape {list(arr.shape)}), the inputs have {n}")
        self._check_target_shape(arr)
        ptr, _ = _new_from_array(np.ascontiguousarray(arr), kd, "targets", copy=True)
        return _Handle(ptr)

    def _check_target_shape(self, arr: np.ndarray) -> None:
        """Targets against the declared shape of the loss's output, where
        known: class indices [N, d...] for logits [N, C, d...] and in
        [0, C) (ignore_index aside), else the output's own shape."""
        k = self._model.outputs.index(self.output) if self.output in self._model.outputs else -1
        shape = self._model.output_shapes[k] if k >= 0 else None
        if shape is None:
            return
        if self.loss in _CLASS_LOSSES:
            want = [shape[0]] + shape[2:] if len(shape) >= 2 else None
            classes = shape[1] if len(shape) >= 2 and isinstance(shape[1], int) else None
        else:
            want, classes = shape, None
        if want is not None:
            ok = arr.ndim == len(want) and all(not isinstance(w, int) or w == g for w, g in zip(want[1:], arr.shape[1:]))
            if not ok:
                what = "class indices" if self.loss in _CLASS_LOSSES else "targets shaped like the output"
                raise InvalidArgument(f"targets: shape {list(arr.shape)}, expected {what} "
                                      f"[{', '.join(map(str, ['N'] + list(want[1:])))}] for output '{self.output}' "
                                      f"{list(shape)}")
        if classes is not None and arr.size:
            bad = (arr < 0) | (arr >= classes)
            if self._ignore_index is not None:
                bad &= arr != self._ignore_index
            if bad.any():
                i = int(np.flatnonzero(bad.reshape(-1))[0])
                raise OutOfRange(f"targets: element {i} is class {int(arr.reshape(-1)[i])}, expected 0..{classes - 1} "
                                 f"(output '{self.output}' has {classes} classes)")

    def _batch(self, inputs: Inputs, targets: Any) -> tuple[InputTensors, _Handle]:
        feed = self._feed(inputs)
        unknown = [n for n in feed if n not in self._model.inputs]
        if unknown:
            raise InvalidArgument(f"input '{unknown[0]}': the model has no such input "
                                  f"(inputs: {', '.join(self._graph_inputs)})")
        missing = [n for n in self._graph_inputs if n not in feed]
        if missing:
            raise InvalidArgument(f"input '{missing[0]}' is missing (inputs given: {', '.join(feed) or 'none'})")
        ins = InputTensors(self._model, feed)
        sizes = {name: np.shape(v)[0] if np.ndim(v) else None for name, v in feed.items()}
        n = next(iter(sizes.values())) if sizes else None
        return ins, self._targets(targets, n)

    def step(self, inputs: Inputs, targets: Any) -> float:
        """One micro-batch: forward, loss, backward; the optimizer updates
        the weights every grad_accum calls. `inputs`: an array (a model
        with one input) or {name: array}, axis 0 the batch. Returns the
        micro-batch's loss."""
        ptr = self._require_open()
        ins, tgt = self._batch(inputs, targets)
        loss = c_double()
        with _JitSync():
            st = self._lib.kiln_trainer_step(ptr, ins.n, ins.names, ins.ptrs, tgt.ptr, ctypes.byref(loss))
        check(st)
        return float(loss.value)

    def evaluate(self, inputs: Inputs, targets: Any, batch_size: Optional[int] = None) -> tuple[float, Optional[float]]:
        """(loss, accuracy) with the current weights in inference mode
        (BatchNormalization on running statistics, no Dropout); accuracy
        (argmax over axis 1 against the targets) for cross_entropy and nll,
        None for the other losses. In batches of batch_size (default 256;
        the loss the mean of the batches' weighted by their sizes), as
        `kiln train --eval` does."""
        ptr = self._require_open()
        feed = self._feed(inputs)
        n = len(np.asarray(targets))
        bs = batch_size or 256
        total, correct, counted = 0.0, 0, 0
        for start in range(0, n, bs):
            part = {k: v[start:start + bs] for k, v in feed.items()}
            ins, tgt = self._batch(part, np.asarray(targets)[start:start + bs])
            loss, c, k = c_double(), c_int64(), c_int64()
            with _JitSync():
                st = self._lib.kiln_trainer_evaluate(ptr, ins.n, ins.names, ins.ptrs, tgt.ptr, ctypes.byref(loss),
                                                     ctypes.byref(c), ctypes.byref(k))
            check(st)
            total += loss.value * min(bs, n - start)
            correct += c.value
            counted += k.value
        acc = correct / counted if self.loss in _CLASS_LOSSES and counted else None
        return total / max(n, 1), acc

    # -- files
    def save_checkpoint(self, directory: str) -> None:
        """weights.npz, optimizer.npz, trainer.json (docs/TRAINING.md) into directory."""
        check(self._lib.kiln_trainer_save_checkpoint(self._require_open(), _path(directory)))

    def load_checkpoint(self, directory: str) -> None:
        """Restores a checkpoint of a trainer of the same model and options."""
        check(self._lib.kiln_trainer_load_checkpoint(self._require_open(), _path(directory)))

    def export(self, path: str) -> None:
        """The model for inference with the trained weights, as an ONNX file."""
        check(self._lib.kiln_trainer_export(self._require_open(), _path(path)))

    # -- the loop
    def fit(self, data: Any, epochs: int = 1, batch_size: int = 32, eval: Any = None,
            callback: Optional[Callable[[dict[str, Any]], Any]] = None, shuffle: Union[bool, int, None] = True,
            steps: Optional[int] = None, progress: bool = True) -> list[dict[str, Any]]:
        """Trains for `epochs` (or until `steps` updates) and returns the log
        `kiln train --log` writes: {"step", "epoch", "loss", "lr"} per update
        (the loss the mean of its micro-batches) and, with eval, {"epoch",
        "eval_loss", "eval_accuracy"} after each epoch.

        data: (X, y) with X an array or {name: array}, axis 0 the samples,
        batched as `kiln train --shuffle SEED` does (shuffle=True: SEED is
        the trainer's seed, as in the CLI; an int: that seed; None or
        False: in order; a final short batch kept); or any iterable of (inputs,
        targets) batches (an epoch is one pass over it; re-iterated each
        epoch). eval: (X, y) evaluated after each epoch in batches of
        batch_size. callback(entry) gets every log entry; returning False
        stops. The progress bar is tqdm's where installed, else a line on
        stderr (progress=False: none)."""
        if epochs < 1 or batch_size < 1:
            raise InvalidArgument(f"epochs and batch_size must be >= 1, got {epochs} and {batch_size}")
        arrays = _as_arrays(data)
        log: list[dict[str, Any]] = []
        if arrays is not None:
            x, y = arrays
            n = len(y)
            for k, v in x.items():
                if len(v) != n:
                    raise InvalidArgument(f"data: array '{k}' has {len(v)} samples, the targets {n}")
            per_epoch: Optional[int] = (n + batch_size - 1) // batch_size
        else:
            per_epoch = len(data) if hasattr(data, "__len__") else None
        per_update = self.grad_accum
        total = steps if steps else (epochs * ((per_epoch + per_update - 1) // per_update) if per_epoch else None)
        bar = _Progress(total, progress)
        acc, in_update, stop = 0.0, 0, False
        try:
            for e in range(epochs):
                if arrays is not None:
                    x, y = arrays
                    if shuffle is None or shuffle is False:
                        order = np.arange(n)
                    else:
                        order = epoch_order(n, self.seed if shuffle is True else int(shuffle), e)
                    batches: Iterable[Any] = ((_rows(x, order[s:s + batch_size]), y[order[s:s + batch_size]])
                                              for s in range(0, n, batch_size))
                else:
                    batches = data
                for batch in batches:
                    inputs, targets = batch
                    lr, before = self.lr, self.updates
                    acc += self.step(inputs, targets)
                    in_update += 1
                    if self.updates == before:
                        continue
                    entry = {"step": self.updates, "epoch": e + 1, "loss": acc / in_update, "lr": lr}
                    acc, in_update = 0.0, 0
                    log.append(entry)
                    bar.update(entry, e + 1, epochs, len(np.asarray(targets)))
                    if callback is not None and callback(entry) is False:
                        stop = True
                    if stop or (steps and self.updates >= steps):
                        stop = True
                        break
                if eval is not None:
                    ex = _as_arrays(eval)
                    if ex is None:
                        raise InvalidArgument("eval: expected (X, y) arrays")
                    el, ea = self.evaluate(ex[0], ex[1], batch_size)
                    entry = {"epoch": e + 1, "eval_loss": el}
                    if ea is not None:
                        entry["eval_accuracy"] = ea
                    log.append(entry)
                    bar.note(entry)
                    if callback is not None and callback(entry) is False:
                        stop = True
                if stop:
                    break
        finally:
            bar.close()
        return log

    # -- lifetime
    def close(self) -> None:
        """Frees the trainer now. Idempotent; other calls afterwards raise."""
        if getattr(self, "_ptr", None) is not None:
            self._lib.kiln_trainer_destroy(self._ptr)
            self._ptr = None
        m = getattr(self, "_model", None)
        if m is not None:
            m.close()


    def __repr__(self) -> str:
        state = f"updates={self.updates}, lr={self.lr:.6g}" if self._ptr is not None else "closed"
        return f"<kiln.Trainer loss={self.loss} optimizer={self.optimizer} {state}>"


def C_DTYPE_NAME(dtype: int) -> str:
    name = C.lib().kiln_dtype_name(dtype)
    return name.decode() if name else f"dtype {dtype}"


def _path(p: Any) -> bytes:
    return os.fsencode(os.fspath(p))


def _parse_schedule(s: str, step_every: int, gamma: float, warmup_steps: int) -> tuple[str, int, float, int]:
    """`kiln train --lr-schedule`'s forms: step:EVERY:GAMMA, warmup:STEPS."""
    parts = s.split(":")
    try:
        if parts[0] == "step" and len(parts) == 3:
            return "step", int(parts[1]), float(parts[2]), warmup_steps
        if parts[0] == "warmup" and len(parts) == 2:
            return "warmup", step_every, gamma, int(parts[1])
    except ValueError:
        pass
    raise InvalidArgument(f"schedule '{s}': expected constant, step:EVERY:GAMMA, cosine or warmup:STEPS")


def _rows(x: dict[str, np.ndarray], idx: np.ndarray) -> Inputs:
    """Rows idx of every input; a single array (data given as (X, y) with X an array) stays one."""
    if list(x) == [""]:
        return x[""][idx]
    return {k: v[idx] for k, v in x.items()}


def _as_arrays(data: Any) -> Optional[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(inputs by name, targets) for (X, y) data; None for an iterable of batches."""
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], np.ndarray):
        x, y = data
        if isinstance(x, Mapping):
            return {k: np.asarray(v) for k, v in x.items()}, y
        if isinstance(x, np.ndarray):
            return {"": x}, y
    return None


class _Progress:
    """tqdm where installed, else one line rewritten on stderr."""

    def __init__(self, total: Optional[int], enabled: bool):
        self.enabled = enabled
        self.total = total
        self.t0 = time.perf_counter()
        self.samples = 0
        self.tqdm = None
        if enabled:
            try:
                from tqdm import tqdm  # type: ignore[import-not-found]
                self.tqdm = tqdm(total=total, unit="step", file=sys.stderr)
            except ImportError:
                pass

    def update(self, entry: dict[str, Any], epoch: int, epochs: int, n: int) -> None:
        if not self.enabled:
            return
        self.samples += n
        if self.tqdm is not None:
            self.tqdm.set_postfix(epoch=f"{epoch}/{epochs}", loss=f"{entry['loss']:.5g}", refresh=False)
            self.tqdm.update(1)
            return
        dt = time.perf_counter() - self.t0
        rate = self.samples / dt if dt > 0 else 0.0
        total = f"/{self.total}" if self.total else ""
        left = dt / entry["step"] * (self.total - entry["step"]) if self.total else 0.0
        sys.stderr.write(f"\repoch {epoch}/{epochs}  step {entry['step']}{total}  loss {entry['loss']:.5g}  "
                         f"{rate:.0f} samples/s  {max(left, 0):.0f} s left   ")
        sys.stderr.flush()

    def note(self, entry: dict[str, Any]) -> None:
        if not self.enabled:
            return
        text = f"epoch {entry['epoch']}: eval loss {entry['eval_loss']:.5g}"
        if "eval_accuracy" in entry:
            text += f", accuracy {entry['eval_accuracy']:.4f}"
        if self.tqdm is not None:
            self.tqdm.write(text)
        else:
            sys.stderr.write("\n" + text + "\n")

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()
        elif self.enabled:
            sys.stderr.write("\n")

