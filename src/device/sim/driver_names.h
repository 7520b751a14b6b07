#pragma once

// Internal to the simulated driver: the driver's types and constants under the names NVIDIA's
// headers give them, so that the simulator's entry points read like the driver's documentation.
// Per-name declarations (not a using-directive): a header must not pour a namespace into its
// includers, and a name the simulator does not use stays qualified.

#include "driver/abi.h"
#include "driver/api.h"
#include "shared_memory.h"
#include "sim/client_entries.h"

namespace cai::device::sim {

using cu::CUcontext;
using cu::CUdevice;
using cu::CUdeviceptr;
using cu::CUevent;
using cu::CUfunction;
using cu::CUgreenCtx;
using cu::CUhostFn;
using cu::CUipcEventHandle;
using cu::CUipcMemHandle;
using cu::CUmemoryPool;
using cu::CUmodule;
using cu::CUresult;
using cu::CUstream;
using cu::cuuint64_t;
using cu::CUuuid;
using cu::GetProcAddressFn;
using enum cu::CUresult;
using cu::CUdevice_attribute;
using enum cu::CUdevice_attribute;
using cu::CUpointer_attribute;
using enum cu::CUpointer_attribute;
using cu::CUmemorytype;
using enum cu::CUmemorytype;
using cu::CUstream_flags;
using enum cu::CUstream_flags;
using cu::CUevent_flags;
using enum cu::CUevent_flags;
using cu::CUmemAttach_flags;
using enum cu::CUmemAttach_flags;
using cu::CUipcMem_flags;
using enum cu::CUipcMem_flags;
using cu::CUdriverProcAddress_flags;
using enum cu::CUdriverProcAddress_flags;
using cu::CUdriverProcAddressQueryResult;
using enum cu::CUdriverProcAddressQueryResult;
using cu::kIpcHandleSize;
using cu::kMemHostRegisterDeviceMap;
using cu::kMemHostRegisterPortable;
using cu::kMemHostRegisterReadOnly;
using cu::stream_legacy;
using cu::stream_per_thread;

using cu::CaiSimAccess;
using cu::CaiSimStats;
using cu::CaiSimTaskFn;
using cu::Driver;
using cu::driver_entry_count;
using cu::kSimRaceResult;
using cu::load_driver;
using cu::sim_entry_count;
// The driver's entries the simulator answers beyond those cai calls (client_entries.h).
using cu::CUctxCreateParams;
using cu::CUmemPool_attribute;
using enum cu::CUmemPool_attribute;
using cu::CUstreamCaptureStatus;
using enum cu::CUstreamCaptureStatus;
using cu::kCtxFlagsMask;
using cu::kCtxSchedMask;
using cu::kErrorPeerAccessAlreadyEnabled;
using cu::kErrorPeerAccessNotEnabled;
using cu::kErrorPeerAccessUnsupported;
using cu::kMemHostAllocDeviceMap;
using cu::kMemHostAllocPortable;
using cu::kMemHostAllocWriteCombined;

// Memory shared between processes (the device heap, interprocess events and exports).
using platform::boot_id;
using platform::ProcessId;
using platform::shared_wait;
using platform::shared_wake_all;
using platform::SharedMapping;

}  // namespace cai::device::sim
