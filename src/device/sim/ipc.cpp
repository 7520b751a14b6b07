// The simulated driver's interprocess handles: device memory and events shared with other
// processes of the machine through shared segments (device/shared_memory.h). A handle names
// an entry of the exporter's table of shared allocations (or events) and carries the entry's
// random token: the importer maps only what the exporter shared, and a handle of memory freed
// since, or one with a field changed, is refused.

#include <cstring>
#include <random>
#include <string>

#include "cai/core/error.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

constexpr std::uint32_t kMemoryHandleMagic = 0x4d494143;  // "CAIM"
constexpr std::uint32_t kEventHandleMagic = 0x45494143;   // "CAIE"
constexpr std::uint32_t kHandleVersion = 2;

// One shared allocation, in the exporter's table (a shared segment other processes map).
struct ExportEntry {
  std::atomic<std::uint64_t> token;  ///< nonzero while shared; written last
  std::uint64_t offset;              ///< of the allocation in its device's segment
  std::uint64_t size;
  std::int32_t fd;  ///< the exporter's descriptor of that segment
  std::int32_t device;
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared between processes");

struct HandleBits {
  std::uint32_t magic = 0;
  std::uint32_t version = kHandleVersion;
  std::int32_t pid = 0;
  std::int32_t table_fd = -1;  ///< the exporter's descriptor of its table
  std::uint64_t start_time = 0;
  std::uint32_t slot = 0;
  std::uint32_t reserved = 0;
  std::uint64_t token = 0;
};
static_assert(sizeof(HandleBits) <= kIpcHandleSize);

std::uint64_t new_token() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  std::uint64_t t = 0;
  while (t == 0) t = gen();
  return t;
}

template <class Handle>
Handle to_handle(const HandleBits& bits) {
  Handle h{};
  std::memcpy(h.reserved, &bits, sizeof bits);
  return h;
}

// The fields of a handle from another process: untrusted, each checked before use.
template <class Handle>
CUresult from_handle(const Handle& h, std::uint32_t magic, const char* what, std::uint32_t slots,
                     HandleBits& bits) {
  std::memcpy(&bits, h.reserved, sizeof bits);
  if (bits.magic != magic)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string("not a simulator ") + what +
                                              " handle (made by another driver, or corrupt)");
  if (bits.version != kHandleVersion)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string("simulator ") + what + " handle version " +
                                              std::to_string(bits.version) +
                                              ", this driver "
                                              "reads version " +
                                              std::to_string(kHandleVersion));
  if (bits.pid == ProcessId::self().pid && bits.start_time == ProcessId::self().start_time)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                std::string("the ") + what + " was exported by this process; use it directly");
  if (bits.slot >= slots || bits.token == 0 || bits.pid <= 0 || bits.table_fd < 0 ||
      bits.reserved != 0)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string("corrupt ") + what + " handle (slot " +
                                              std::to_string(bits.slot) + ", descriptor " +
                                              std::to_string(bits.table_fd) + ")");
  return CUDA_SUCCESS;
}

// A driver call must never throw: the segment errors become return codes.
template <class F>
CUresult mapped(F&& f) {
  try {
    f();
    return CUDA_SUCCESS;
  } catch (const Error& e) {
    return fail(CUDA_ERROR_INVALID_VALUE, e.what());
  }
}

}  // namespace

SharedMapping& SimDriver::export_table_locked() {
  if (!export_table_)
    export_table_ = SharedMapping::create(kExportSlots * sizeof(ExportEntry), "cai-sim-exports");
  return *export_table_;
}

void SimDriver::unexport_locked(const Allocation& a) {
  if (a.export_slot == ~0u || !export_table_) return;
  reinterpret_cast<ExportEntry*>(export_table_->data())[a.export_slot].token.store(0);
  free_export_slots_.push_back(a.export_slot);
}

CUresult SimDriver::cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  if (CUresult r = freed_async_locked(ptr, "cuIpcGetMemHandle")) return r;
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::device) {
    std::string why = hex(ptr) + " is not the start of a cuMemAlloc allocation";
    if (it != memory_.end() && it->second.kind == Kind::pool)
      why += " (memory of the default stream-ordered pool is not legacy-IPC capable)";
    return fail(CUDA_ERROR_INVALID_VALUE, why);
  }
  Allocation& a = it->second;
  auto* table = reinterpret_cast<ExportEntry*>(export_table_locked().data());
  if (a.export_slot == ~0u) {
    std::uint32_t slot = 0;
    if (!free_export_slots_.empty()) {
      slot = free_export_slots_.back();
      free_export_slots_.pop_back();
    } else if (next_export_slot_ < kExportSlots) {
      slot = next_export_slot_++;
    } else {
      return fail(CUDA_ERROR_OUT_OF_MEMORY, "all " + std::to_string(kExportSlots) +
                                                " shareable allocations of the simulator are "
                                                "shared already");
    }
    DeviceHeap& heap = heap_locked(a.device);
    ExportEntry& e = table[slot];
    const auto [fd, offset] = heap.share_point(ptr);
    e.offset = offset;
    // The driver shares the whole underlying block, more than the allocation.
    e.size = heap.shared_block(ptr, a.size);
    e.fd = fd;
    e.device = a.device;
    e.token.store(new_token());
    a.export_slot = slot;
  }
  HandleBits bits;
  bits.magic = kMemoryHandleMagic;
  bits.pid = ProcessId::self().pid;
  bits.start_time = ProcessId::self().start_time;
  bits.table_fd = export_table_->fd();
  bits.slot = a.export_slot;
  bits.token = table[a.export_slot].token.load();
  *handle = to_handle<CUipcMemHandle>(bits);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuIpcOpenMemHandle(CUdeviceptr* ptr, CUipcMemHandle handle,
                                       unsigned int flags) {
  if (ptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuIpcOpenMemHandle: flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS");
  HandleBits bits;
  if (CUresult r = from_handle(handle, kMemoryHandleMagic, "memory", kExportSlots, bits)) return r;
  const ProcessId owner{bits.pid, bits.start_time};
  {
    std::lock_guard lk(mu_);
    int device = 0;
    if (CUresult r = need_context_locked(device)) return r;
    auto known = opened_.find({bits.pid, bits.start_time, bits.table_fd, bits.slot, bits.token});
    if (known != opened_.end()) {
      ++memory_.at(known->second).opened_refs;
      *ptr = known->second;
      return CUDA_SUCCESS;
    }
  }
  // The exporter's entry says what was shared; the handle only points at it.
  std::shared_ptr<SharedMapping> table, segment;
  std::uint64_t size = 0;
  if (CUresult r = mapped([&] {
        table = SharedMapping::open(owner, bits.table_fd,
                                    std::uint64_t{bits.slot} * sizeof(ExportEntry),
                                    sizeof(ExportEntry), "cuIpcOpenMemHandle");
      }))
    return r;
  const auto& entry = *reinterpret_cast<const ExportEntry*>(table->data());
  const std::uint64_t offset = entry.offset;
  size = entry.size;
  const std::int32_t fd = entry.fd;
  if (entry.token.load() != bits.token)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "the handle names memory that process " + std::to_string(bits.pid) +
                    " no longer shares (freed since), or a field of it was changed");
  if (CUresult r = mapped(
          [&] { segment = SharedMapping::open(owner, fd, offset, size, "cuIpcOpenMemHandle"); }))
    return r;
  // Checked again: the exporter may have freed it while we mapped.
  if (entry.token.load() != bits.token)
    return fail(CUDA_ERROR_INVALID_VALUE, "the memory was freed while it was being opened");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const std::size_t reserved = (size + 4095) / 4096 * 4096;
  const std::uint64_t base = reserve_addresses(reserved);
  Allocation a;
  a.size = size;
  a.kind = Kind::opened;
  a.device = device;
  a.host = segment->data();
  a.mapping = std::move(segment);
  a.opened_refs = 1;
  add_allocation_locked(base, std::move(a));
  opened_[{bits.pid, bits.start_time, bits.table_fd, bits.slot, bits.token}] = base;
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuIpcCloseMemHandle(CUdeviceptr ptr) {
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::opened)
    return fail(CUDA_ERROR_INVALID_VALUE,
                hex(ptr) + " is not memory opened with cuIpcOpenMemHandle");
  if (--it->second.opened_refs > 0) return CUDA_SUCCESS;
  const Allocation a = std::move(it->second);
  memory_.erase(it);
  std::erase_if(opened_, [ptr](const auto& o) { return o.second == ptr; });
  // Work already queued may still read it: unmapped only after that work.
  drain_locked(lk);
  races_.forget(ptr, ptr + a.size);
  unreserve_addresses(ptr, (a.size + 4095) / 4096 * 4096);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent e) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!ev->shared || ev->shared->opened)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "event " + hex(handle_value(e)) +
                    " was not created with CU_EVENT_INTERPROCESS in this process");
  SharedEventSlot& slot = *ev->shared->slot;
  if (slot.token.load() == 0) slot.token.store(new_token());
  HandleBits bits;
  bits.magic = kEventHandleMagic;
  bits.pid = ProcessId::self().pid;
  bits.start_time = ProcessId::self().start_time;
  bits.table_fd = event_table_->fd();
  bits.slot = ev->shared->index;
  bits.token = slot.token.load();
  *handle = to_handle<CUipcEventHandle>(bits);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  HandleBits bits;
  if (CUresult r = from_handle(handle, kEventHandleMagic, "event", kEventSlots, bits)) return r;
  auto shared = std::make_shared<SharedEvent>();
  if (CUresult r = mapped([&] {
        shared->table = SharedMapping::open(ProcessId{bits.pid, bits.start_time}, bits.table_fd,
                                            std::uint64_t{bits.slot} * sizeof(SharedEventSlot),
                                            sizeof(SharedEventSlot), "cuIpcOpenEventHandle");
      }))
    return r;
  shared->slot = reinterpret_cast<SharedEventSlot*>(shared->table->data());
  if (shared->slot->token.load() != bits.token)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "the handle names an event that process " + std::to_string(bits.pid) +
                    " no longer shares (destroyed since), or a field of it was changed");
  shared->index = bits.slot;
  shared->owner = ProcessId{bits.pid, bits.start_time};
  shared->opened = true;
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const std::uint64_t e = kEventBase + ++next_handle_;
  Event& ev = events_[e];
  ev.flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  ev.device = device;
  ev.shared = std::move(shared);
  *event = reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(e));
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
