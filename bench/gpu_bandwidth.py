"""Bandwidth of cai's device operations against CuPy and PyTorch on the same buffers, and the
GPU targets of docs/benchmarks.md.

Imported by bench/gpu_interop.py, which runs it and reports it; see docs/benchmarks.md, "GPU".

Every operation runs on the legacy default stream, where cai's arrays (stream=0), CuPy's null
stream and PyTorch's default stream all queue their work, and is timed with cai's timing events
recorded on that stream: `batch` calls between two events, `reps` samples, interleaved across
the libraries, the median reported. The buffers are allocated once by cai and viewed zero-copy
by CuPy (CAI) and PyTorch (DLPack), so every library reads and writes the same memory; two
buffer sets alternate within a batch so that one call does not find the previous call's output
in the L2 cache. GB/s count the bytes read and written once per element (an add reads two
arrays and writes one, even when both inputs are the same array).
"""

from __future__ import annotations

import statistics

import numpy as np

import cai

# CUDA sources of the hardware references (compiled by CuPy's NVRTC; not cai code).
TILED_TRANSPOSE = r"""
extern "C" __global__ void ref_transpose(const float* __restrict__ src, float* __restrict__ dst,
                                         int n) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < n && y + j < n) tile[threadIdx.y + j][threadIdx.x] = src[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < n && y + j < n) dst[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""

VECTOR_FILL = r"""
extern "C" __global__ void ref_fill4(float4* __restrict__ dst, size_t n4, float value) {
  float4 v = make_float4(value, value, value, value);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = v;
}
"""

# key -> (label, bytes moved per call in units of one size x size float32 array)
OPERATIONS = {
    "copy": ("contiguous copy", 2),
    "transpose": ("transposed copy", 2),
    "reverse": ("reversed both axes", 2),
    "every_2nd_column": ("every 2nd column", 1),
    "fill": ("fill", 1),
    "add_same": ("add (same input twice)", 3),
    "add_transposed": ("add with one transposed input", 3),
}

REFERENCE_LABELS = {"copy": "device memcpy", "transpose": "32x32 shared-memory tile",
                    "fill": "16-byte stores"}
PEER_NOTES = {("torch", "reverse"): "torch.flip, a new tensor"}


class Buffers:
    """One buffer set: src and b (inputs), dst, and half (size x size/2), as cai arrays and
    zero-copy CuPy / PyTorch views of them."""

    def __init__(self, size, cp=None, torch=None):
        self.cai = {
            "src": cai.device_array((size, size), dtype=np.float32),
            "b": cai.device_array((size, size), dtype=np.float32),
            "dst": cai.device_array((size, size), dtype=np.float32),
            "half": cai.device_array((size, size // 2), dtype=np.float32),
        }
        cai.ops.fill(self.cai["src"], 1.0)
        cai.ops.fill(self.cai["b"], 2.0)
        cai.synchronize()
        self.cupy = {k: cp.asarray(v) for k, v in self.cai.items()} if cp else None
        self.torch = {k: torch.from_dlpack(v) for k, v in self.cai.items()} if torch else None


def implementations(cp, torch, size):
    """{operation: {implementation: call(buffers)}}; absent libraries are left out."""
    ops = {k: {} for k in OPERATIONS}
    c = cai.ops
    ops["copy"]["cai"] = lambda B: c.copy(B.cai["dst"], B.cai["src"])
    ops["transpose"]["cai"] = lambda B: c.copy(B.cai["dst"], B.cai["src"].T)
    ops["reverse"]["cai"] = lambda B: c.copy(B.cai["dst"], B.cai["src"][::-1, ::-1])
    ops["every_2nd_column"]["cai"] = lambda B: c.copy(B.cai["half"], B.cai["src"][:, ::2])
    ops["fill"]["cai"] = lambda B: c.fill(B.cai["dst"], 1.5)
    ops["add_same"]["cai"] = lambda B: c.add(B.cai["src"], B.cai["src"], B.cai["dst"])
    ops["add_transposed"]["cai"] = lambda B: c.add(B.cai["src"], B.cai["b"].T, B.cai["dst"])
    if cp is not None:
        ops["copy"]["cupy"] = lambda B: cp.copyto(B.cupy["dst"], B.cupy["src"])
        ops["transpose"]["cupy"] = lambda B: cp.copyto(B.cupy["dst"], B.cupy["src"].T)
        ops["reverse"]["cupy"] = lambda B: cp.copyto(B.cupy["dst"], B.cupy["src"][::-1, ::-1])
        ops["every_2nd_column"]["cupy"] = lambda B: cp.copyto(B.cupy["half"],
                                                              B.cupy["src"][:, ::2])
        ops["fill"]["cupy"] = lambda B: B.cupy["dst"].fill(1.5)
        ops["add_same"]["cupy"] = lambda B: cp.add(B.cupy["src"], B.cupy["src"],
                                                   out=B.cupy["dst"])
        ops["add_transposed"]["cupy"] = lambda B: cp.add(B.cupy["src"], B.cupy["b"].T,
                                                         out=B.cupy["dst"])
        nbytes = size * size * 4
        transpose = cp.RawKernel(TILED_TRANSPOSE, "ref_transpose")
        fill4 = cp.RawKernel(VECTOR_FILL, "ref_fill4")
        blocks = (size + 31) // 32
        ops["copy"]["reference"] = lambda B: cp.cuda.runtime.memcpyAsync(
            B.cai["dst"].ptr, B.cai["src"].ptr, nbytes, 3, 0)  # 3: device to device
        ops["transpose"]["reference"] = lambda B: transpose(
            (blocks, blocks), (32, 8), (B.cupy["src"], B.cupy["dst"], np.int32(size)))
        ops["fill"]["reference"] = lambda B: fill4(
            (132 * 16,), (256,), (B.cupy["dst"], np.uint64(nbytes // 16), np.float32(1.5)))
    if torch is not None:
        ops["copy"]["torch"] = lambda B: B.torch["dst"].copy_(B.torch["src"])
        ops["transpose"]["torch"] = lambda B: B.torch["dst"].copy_(B.torch["src"].t())
        ops["reverse"]["torch"] = lambda B: torch.flip(B.torch["src"], (0, 1))
        ops["every_2nd_column"]["torch"] = lambda B: B.torch["half"].copy_(
            B.torch["src"][:, ::2])
        ops["fill"]["torch"] = lambda B: B.torch["dst"].fill_(1.5)
        ops["add_same"]["torch"] = lambda B: torch.add(B.torch["src"], B.torch["src"],
                                                       out=B.torch["dst"])
        ops["add_transposed"]["torch"] = lambda B: torch.add(B.torch["src"], B.torch["b"].t(),
                                                             out=B.torch["dst"])
    return ops


def time_ms(call, sets, batch, start, end):
    """Milliseconds per call: `batch` calls, alternating buffer sets, between two events."""
    start.record()
    for k in range(batch):
        call(sets[k % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / batch


def measure(cp, torch, size=8192, reps=20, batch=5, warmup=3):
    """Rows {key, label, bytes, gbps: {impl: GB/s}, errors: {impl: message}}, one per
    operation. A failing implementation is reported, never fatal."""
    sets = [Buffers(size, cp, torch) for _ in range(2)]
    impls = implementations(cp, torch, size)
    start, end = cai.event(), cai.event()
    rows = []
    for key, (label, arrays) in OPERATIONS.items():
        nbytes = arrays * size * size * 4
        samples, errors = {}, {}
        for impl, call in impls[key].items():
            try:
                for _ in range(warmup):
                    call(sets[0])
                cai.synchronize()
                samples[impl] = []
            except Exception as e:  # noqa: BLE001 - reported in the table
                errors[impl] = f"{type(e).__name__}: {e}"[:160]
        for _ in range(reps):
            for impl in samples:
                samples[impl].append(time_ms(impls[key][impl], sets, batch, start, end))
        gbps = {impl: nbytes / (statistics.median(ms) * 1e-3) / 1e9
                for impl, ms in samples.items()}
        rows.append({"key": key, "label": label, "bytes": nbytes, "gbps": gbps,
                     "errors": errors, "reference": REFERENCE_LABELS.get(key)})
    del sets
    cai.synchronize()
    return rows


def targets(row, memcpy=None):
    """Issue 15's targets for one row: (text, met; None when nothing is measurable). `memcpy`:
    the device memcpy figure, the hardware figure for copy and add."""
    g = row["gbps"]
    if "cai" not in g:
        return "-", None
    peers = [g[p] for p in ("cupy", "torch") if p in g]
    checks = []
    if peers:
        checks.append((f">= 90% of best peer: {100 * g['cai'] / max(peers):.0f}%",
                       g["cai"] >= 0.9 * max(peers)))
    hardware = {"copy": memcpy, "add_same": memcpy, "fill": g.get("reference")}.get(row["key"])
    if hardware:
        checks.append((f">= 90% of hardware: {100 * g['cai'] / hardware:.0f}%",
                       g["cai"] >= 0.9 * hardware))
    if row["key"] == "transpose" and peers:
        checks.append((f">= 2.5x CuPy and PyTorch: {g['cai'] / max(peers):.2f}x",
                       g["cai"] >= 2.5 * max(peers)))
    if not checks:
        return "-", None
    return "; ".join(t for t, _ in checks), all(ok for _, ok in checks)
