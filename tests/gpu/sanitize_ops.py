"""cai's device operations over every layout and dtype of the GPU suite, odd sizes and misaligned
views, each result checked against NumPy. Not a pytest module: scripts/gpu-check.sh runs it under
`compute-sanitizer --tool memcheck`, which reports any out-of-bounds or misaligned access by the
kernels. Exits 1 on a wrong result, 0 otherwise.

    CAI_BACKEND=cuda python3 tests/gpu/sanitize_ops.py
"""

import os
import sys

os.environ.setdefault("CAI_BACKEND", "cuda")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import cai  # noqa: E402
from gpu_helpers import DTYPES, LAYOUTS, reference, values  # noqa: E402

failures = []


def check(what, got, expect):
    if got.shape != expect.shape or not np.array_equal(got, expect):
        failures.append(what)
        print(f"WRONG: {what}", flush=True)


def layouts_and_dtypes():
    for layout, (base_shape, view) in LAYOUTS.items():
        for dtype in DTYPES:
            host_base, _, expect = reference(layout, dtype)
            base = cai.to_device(host_base)
            src = view(base)
            name = f"{layout} {dtype}"

            dst = cai.device_array(src.shape, dtype=dtype)
            cai.ops.copy(dst, src)
            check(f"copy from {name}", dst.copy_to_host(), expect)

            out_base = cai.to_device(np.zeros(base_shape, dtype))
            cai.ops.copy(view(out_base), cai.to_device(expect))
            check(f"copy into {name}", out_base.copy_to_host(), host_base)

            fill_base = cai.to_device(np.zeros(base_shape, dtype))
            value = values(dtype, (1,), seed=3)[0]
            cai.ops.fill(view(fill_base), value)
            expect_fill = np.zeros(base_shape, dtype)
            view(expect_fill)[...] = value
            check(f"fill {name}", fill_base.copy_to_host(), expect_fill)

            out = cai.device_array(src.shape, dtype=dtype)
            cai.ops.add(src, src, out)
            with np.errstate(over="ignore"):
                check(f"add {name}", out.copy_to_host(), expect + expect)


def odd_sizes_and_misaligned():
    host = np.arange(257 * 131, dtype=np.float32).reshape(257, 131)
    a = cai.to_device(host)
    t = cai.device_array((131, 257), dtype=np.float32)
    cai.ops.copy(t, a.T)
    check("transposed copy 257x131", t.copy_to_host(), host.T)

    raw = cai.to_device(np.arange(1_000_003, dtype=np.int64).astype(np.int8))
    shifted = raw[1:]  # one byte off any vector alignment
    cai.ops.fill(shifted, 5)
    got = raw.copy_to_host()
    check("fill misaligned int8", got[1:], np.full(1_000_002, 5, np.int8))
    check("fill misaligned int8 keeps byte 0", got[:1], np.zeros(1, np.int8))

    f = np.linspace(0, 1, 4099, dtype=np.float32)
    fa = cai.to_device(f)
    out = cai.device_array(4098, dtype=np.float32)
    cai.ops.add(fa[1:], fa[:-1], out)
    check("add float32 at element offsets 1 and 0", out.copy_to_host(), f[1:] + f[:-1])

    c = (np.arange(1001) + 1j * np.arange(1001)).astype(np.complex128)
    ca = cai.to_device(c)
    cout = cai.device_array(500, dtype=np.complex128)
    cai.ops.copy(cout, ca[1::2])
    check("copy complex128 stepped", cout.copy_to_host(), c[1::2])


def main():
    print(f"cai {cai.__version__} on {cai.backend()}", flush=True)
    layouts_and_dtypes()
    odd_sizes_and_misaligned()
    cai.synchronize()
    print(f"{len(failures)} wrong results" if failures else "all results correct", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
