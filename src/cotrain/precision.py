"""Precision that fits the hardware, and the record of the machine a run ran on.

bf16 autocast pays only where the hardware computes in bf16 natively: CUDA GPUs from Ampere on, and
CPUs with AVX512-BF16 or AMX whose ATen kernels run at AVX-512 level. Elsewhere torch emulates it,
and on an AVX2-only CPU a bf16 step was 16x slower than the same step in fp32. `train.bf16: auto`
(the default) turns autocast on only where it is native; an explicit `true` where it is not warns.

`machine()` is what `env.json` in every run directory holds: the CPU, its kernel level and threads,
the library versions, the GPUs, and any variable that forces the float kernels down. Float results
differ in the last bits between kernel levels, so a figure is comparable only with its machine.
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

from cotrain import threads

# Variables that force torch's CPU kernels (ATen, MKL, oneDNN) to a lower instruction set.
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def _cpu_flag(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)  # private helpers: absent in some torch releases
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - a failed probe means "not known to be there"
        return False


def _onednn_capped_below_bf16() -> bool:
    """oneDNN told to stay below the AVX-512 BF16 instruction set (its bf16 matmuls would be emulated)."""
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").lower()
    return bool(isa) and not any(s in isa for s in ("bf16", "amx", "avx10", "all"))


def native_bf16(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """Whether bf16 arithmetic runs natively on `device`, and why, in a few words."""
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        try:
            ok = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch releases before the keyword
            ok = torch.cuda.is_bf16_supported()
        return ok, f"{name} {'has' if ok else 'lacks'} native bf16"
    if dev.type != "cpu":
        return False, f"bf16 speed on {dev.type} is not known"
    level = torch.backends.cpu.get_cpu_capability()
    units = [u for u, flag in (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
             if _cpu_flag(flag)]
    if not units:
        return False, f"this CPU ({level}) has no native bf16"
    if not level.upper().startswith("AVX512") or _onednn_capped_below_bf16():
        return False, f"this CPU has {'/'.join(units)} but its kernels are held at {level}"
    return True, f"this CPU ({level}) has {'/'.join(units)}"


def resolve_bf16(setting: bool | str, devices: list[torch.device | str]) -> tuple[bool, str]:
    """The autocast choice of `train.bf16` on these devices, and the line that says it.

    "auto": on where bf16 is native on every device, else off. An explicit true where it is not
    native stays on, and the line warns that it is slow.
    """
    verdicts = [native_bf16(d) for d in dict.fromkeys(str(torch.device(d)) for d in devices) or ["cpu"]]
    native = all(ok for ok, _ in verdicts)
    why = "; ".join(w for _, w in verdicts)
    if setting == "auto":
        return native, f"precision: bf16 autocast {'on' if native else 'off'} (train.bf16=auto: {why})"
    if setting and not native:
        return True, (f"warning: train.bf16=true but {why}: bf16 is emulated there and can be many times slower "
                      "than fp32 (train.bf16=auto chooses for you)")
    return bool(setting), f"precision: bf16 autocast {'on' if setting else 'off'} (train.bf16={str(setting).lower()})"


def dtype_warning(dtype: str, device: torch.device | str) -> str | None:
    """A warning when weights of `dtype` compute slowly on `device` (half precision without native support)."""
    if dtype == "bfloat16":
        ok, why = native_bf16(device)
        if not ok:
            return f"warning: model.dtype=bfloat16 but {why}: its matmuls are emulated and slow (float32 is faster here)"
    if dtype == "float16" and torch.device(device).type == "cpu" and not _cpu_flag("_is_amx_fp16_supported"):
        return "warning: model.dtype=float16 on a CPU without AMX-FP16: its matmuls are emulated and slow (use float32)"
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_family_model() -> str | None:
    """"family/model" of the CPU (/proc/cpuinfo's `cpu family` and `model`, e.g. "25/17"): machines that
    share a name and an instruction set can still differ in their float results; None off Linux."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("cpu family", "model") and key not in found:
                    found[key] = value.strip()
                if len(found) == 2 or not line.strip():
                    break
    except OSError:
        return None
    return f"{found['cpu family']}/{found['model']}" if len(found) == 2 else None


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def machine() -> dict:
    """The machine a run or a measurement ran on (JSON-ready): what makes its float results and speed."""
    return {
        "cpu": _cpu_name(),
        "cpu_family_model": _cpu_family_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_native_bf16": native_bf16("cpu")[0],
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "threads_reason": threads.CHOSEN.reason if threads.CHOSEN else None,
        "kernel_variables": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "cuda": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else [],
    }


def provenance() -> dict:
    """What made a run: cotrain's version, the commit of its source tree (with `dirty` when it has
    uncommitted changes; None outside a git checkout) and the command line."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    src = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip()) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    try:
        ours = version("cotrain")
    except PackageNotFoundError:
        ours = None
    return {"cotrain": ours, "commit": commit, "dirty": dirty, "command": " ".join(["cotrain", *sys.argv[1:]])
            if Path(sys.argv[0]).name == "cotrain" else " ".join(sys.argv),
            "cwd": os.getcwd()}  # what the config's relative paths are relative to (cli.rebase_paths)


def machine_line(info: dict | None = None) -> str:
    """One line naming the machine, for benchmark outputs and figures."""
    m = info or machine()
    forced = ",".join(f"{k}={v}" for k, v in m["kernel_variables"].items())
    gpus = f", {len(m['cuda'])}x {m['cuda'][0]}" if m["cuda"] else ""
    return (f"{m['cpu']} ({m['cpu_capability']}{', native bf16' if m['cpu_native_bf16'] else ''}"
            f"{', ' + forced if forced else ''}), {m['threads']} threads{gpus} | torch {m['torch']}, "
            f"transformers {m['transformers']}")
