#pragma once

// Layer 4: arrays shared with other processes of the same machine (CUDA IPC), with a reference
// count shared between the processes and an interprocess event for ordering. The rules are in
// docs/scale-out.md: a handle is made by ipc_export; every copy sent to another process carries
// its own ticket (ipc_issue_ticket), which is one reference and opens once; the exporter keeps
// the memory while references are out, and frees it at ipc_collect once all came back.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cai/arrays/view.h"

namespace cai {

/// What another process needs to open an array of this one. Plain data (the Python layer
/// pickles its fields), plus `keep`, which holds the export in this process and is not sent.
struct IpcArrayHandle {
  // Where it can be opened.
  std::string boot_id;  ///< this machine and boot (/proc/sys/kernel/random/boot_id)
  std::string backend;  ///< "cuda" or "simulator"
  std::array<std::uint8_t, 16> device_uuid{};
  int device = 0;  ///< the exporter's ordinal for the device (informative)
  // The memory: absent for a zero-size array.
  bool has_memory = false;
  device::IpcMemoryHandle memory;
  std::uint64_t alloc_size = 0;
  std::uint64_t offset = 0;  ///< from the allocation's start to the element at (0, ..., 0)
  // The array.
  DType dtype;
  Dims shape, strides;  ///< strides in bytes
  bool readonly = false;
  // Ordering: an event recorded after the work queued on the array (absent: none queued).
  bool has_event = false;
  device::IpcEventHandle event;
  // Lifetime: the reference count in the control segment of the process that owns the memory.
  std::int32_t owner_pid = 0;
  std::uint64_t owner_start = 0;  ///< the owner's start time (pid reuse)
  std::int32_t control_fd = -1;
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  std::uint64_t ticket = 0;  ///< 0 until ipc_issue_ticket: not a reference yet
  /// Keeps the export alive in this process while the handle exists (not sent).
  std::shared_ptr<const void> keep;
  /// The mask's own handle (memory, event, reference), exported, ticketed, opened and given
  /// back with the array's; null for an array without a mask.
  std::shared_ptr<const IpcArrayHandle> mask;
};

/// Shares v with other processes: registers its allocation once (the memory then stays alive
/// while any reference is out, even when every View of it is gone) and records an interprocess
/// event after the work queued on v, so that an importer's first use waits for it. The host
/// does not wait. Memory that this process opened from another is forwarded (its owner's
/// count is used); there, queued work is waited for instead, as no event could outlive the
/// forwarder. Throws Error(value_error) for memory that is not device memory.
IpcArrayHandle ipc_export(const View& v);

/// A copy of h that is one new reference for another process (each serialized copy needs its
/// own: a ticket opens once). Also releases exports whose references all came back.
IpcArrayHandle ipc_issue_ticket(const IpcArrayHandle& h);

/// Opens h in this process: maps the memory on the device with h's uuid (once per allocation
/// and process), makes `stream` wait for the exporter's event without blocking the host, and
/// returns a View on `stream` whose last copy releases the reference. A handle of this process
/// gives a view of the original memory. Errors name the cause: another machine or boot,
/// another backend, a ticket opened before (in this process or another), an exporter that
/// exited, a device that is not visible here.
View ipc_open(const IpcArrayHandle& h, const sync::StreamRef& stream);

/// Maps memory another process shared with the driver's own handle (a CUipcMemHandle of
/// cuIpcGetMemHandle, as Numba's and CuPy's exports give) on the current device, as an array
/// of `dtype` and `layout` whose element (0, ..., 0) is `offset` bytes into the shared memory.
/// The handle says nothing else: the array must lie inside what the driver mapped (else
/// Error(value_error), after the mapping is closed again); the exporter keeps its memory alive
/// and its work complete, as the driver's IPC requires. The mapping is closed when the last view
/// goes. The data imports as a producer that named no stream (SyncState::ImportedIdle).
View ipc_open_driver_handle(const device::IpcMemoryHandle& handle, DType dtype, Layout layout,
                            std::uint64_t offset, bool readonly);

/// Gives back the reference of a handle that will never be opened (never throws).
void ipc_discard(const IpcArrayHandle& h) noexcept;

/// Gives back every reference this process holds, for a process about to end without running
/// destructors (multiprocessing's children end with os._exit); what it opened stays mapped
/// until then.
void ipc_return_all() noexcept;

/// Releases the exports of this process whose references all came back and that no handle
/// here holds; returns how many. Runs at every export and ticket too.
std::size_t ipc_collect();

/// Exports of this process that other processes still hold references to.
std::size_t ipc_exports_in_use();

/// What this process keeps about IPC, for tests that prove it stays bounded: tickets opened
/// here whose arrays are alive, mappings of other processes' memory, leases, and the reference
/// tables of other processes mapped here.
struct IpcRecords {
  std::size_t opened = 0, imports = 0, leases = 0, controls = 0;
};
IpcRecords ipc_records();

/// At exit, once device::set_exiting() was called (device memory is leaked from then on, so
/// importers keep it): releases what the exports keep alive, a Python owner among them, while
/// the interpreter still runs. Does nothing before set_exiting().
void ipc_release_at_exit() noexcept;

}  // namespace cai
