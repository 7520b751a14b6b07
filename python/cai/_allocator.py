"""cai.set_allocator: every device allocation of cai arrays through the caller's allocator
(docs/python.md, "Allocators")."""

from __future__ import annotations

from typing import Callable, Optional, Tuple, cast

import atexit

from . import _cai

# Before the interpreter finalizes (docs/reliability.md): arrays alive at exit leak their memory
# rather than call Python, and their allocators let go of the module globals they hold.
atexit.register(_cai._release_allocators_at_exit)

AllocateFn = Callable[[int, int, int], int]
DeallocateFn = Callable[[int, int, int, int], None]


def set_allocator(allocate: Optional[AllocateFn] = None,
                  deallocate: Optional[DeallocateFn] = None
                  ) -> Optional[Tuple[AllocateFn, DeallocateFn]]:
    """Routes the device memory of every cai array allocated from now on (and of the
    operations' temporaries) through `allocate(nbytes, device, stream) -> int` and
    `deallocate(ptr, nbytes, device, stream)`; `stream` is a CUDA stream handle (1 and 2 are
    the default streams). Memory is used in stream order on `stream`; when `deallocate` is
    called, cai has ordered the work it queued on the memory before `stream`. Both callables,
    or neither (None: cai's own allocator). Arrays keep the allocator that made them. Returns
    the pair set before (None for cai's own), as CuPy's set_allocator is undone."""
    if (allocate is None) != (deallocate is None):
        raise TypeError("cai.set_allocator(): give both allocate and deallocate, or neither "
                        "(None restores cai's own allocator)")
    for name, f in (("allocate", allocate), ("deallocate", deallocate)):
        if f is not None and not callable(f):
            raise TypeError(f"cai.set_allocator(): {name} must be callable, got "
                            f"{type(f).__name__}")
    previous = get_allocator()
    if allocate is None or deallocate is None:
        _cai._set_allocator(None, None)
        return previous
    user_allocate, user_deallocate = allocate, deallocate

    def checked_allocate(nbytes: int, device: int, stream: int) -> int:
        try:
            return user_allocate(nbytes, device, stream)
        except Exception as e:
            e.add_note(f"(raised by the allocate() given to cai.set_allocator, for {nbytes} "
                       f"bytes on device {device}, stream {stream})")
            raise

    checked_allocate.__wrapped__ = user_allocate  # type: ignore[attr-defined]
    _cai._set_allocator(checked_allocate, user_deallocate)
    return previous


def get_allocator() -> Optional[Tuple[AllocateFn, DeallocateFn]]:
    """The (allocate, deallocate) pair given to set_allocator, or None for cai's own."""
    pair = _cai._get_allocator()
    if pair is None:
        return None
    allocate = cast(AllocateFn, getattr(pair[0], "__wrapped__", pair[0]))
    return allocate, cast(DeallocateFn, pair[1])
