#pragma once

// Internal to the extension: what each binding file adds to cai._cai (module.cpp calls them in
// this order).

#include <nanobind/nanobind.h>

#include <initializer_list>

namespace cai::python {

/// A dict of C++ values under their keys, in order: dict_of({"name"_a = p.name, ...}) (each value
/// converted as a binding's result is).
inline nanobind::dict dict_of(std::initializer_list<nanobind::arg_v> fields) {
  nanobind::dict d;
  for (const nanobind::arg_v& f : fields) d[f.name_] = f.value;
  return d;
}

void bind_errors(nanobind::module_& m);     // errors.cpp: cai.DeviceError, cai.RaceError
void bind_core(nanobind::module_& m);       // core.cpp: cai._cai.core probes
void bind_device(nanobind::module_& m);     // device.cpp: streams, events, cai.sim
void bind_array(nanobind::module_& m);      // array.cpp: DeviceNDArray, constructors
void bind_indexing(nanobind::module_& m);   // indexing.cpp: __getitem__, __setitem__
void bind_shape_ops(nanobind::module_& m);  // shape_ops.cpp: reshape, view, split, copy
void bind_interface(nanobind::module_& m);  // interface.cpp: the CAI in both directions
void bind_import(nanobind::module_& m);     // import.cpp: the import entries
void bind_ops(nanobind::module_& m);        // ops.cpp: cai.ops
void bind_dlpack(nanobind::module_& m);     // dlpack.cpp: DLPack in both directions
void bind_capi(nanobind::module_& m);       // capi.cpp: the C API capsule
void bind_info(nanobind::module_& m);       // info.cpp: python -m cai info
void bind_devices(nanobind::module_& m);    // devices.cpp: several devices
void bind_ipc(nanobind::module_& m);        // ipc.cpp: IPC handles
void bind_allocator(nanobind::module_& m);  // allocator.cpp: cai.set_allocator

}  // namespace cai::python
