// The backend's streams, events and host functions.

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cai/core/error.h"

namespace cai::device {

using detail::BackendState;
using detail::to_event;
using detail::to_stream;
using namespace cu;

namespace {

// event_record and stream_wait_event (hot paths): counts the call, checks both handles in the
// order of the entry's parameters (`event_first`: the message names the first bad one), then
// calls the driver's `entry` in the stream's context. A template, so nothing is paid for it.
template <class Call>
void event_and_stream(BackendState& st, detail::Counter& count, EventHandle e, StreamHandle s,
                      bool event_first, std::string_view where, std::string_view entry, Call call) {
  count.bump();
  CUevent event = nullptr;
  if (event_first) event = to_event(e, where);
  CUstream stream = to_stream(s, where);
  if (!event_first) event = to_event(e, where);
  if (is_default_stream(s)) st.current_context();
  st.check(st.with_context([&] { return call(st.api, event, stream); }), entry);
}

}  // namespace

StreamHandle Backend::stream_create(bool non_blocking) {
  BackendState& st = *state_;
  st.current_context();
  CUstream s = nullptr;
  CAI_DRIVER(st, cuStreamCreate, &s, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
  return reinterpret_cast<std::uintptr_t>(s);
}

void Backend::stream_destroy(StreamHandle s) {
  constexpr std::string_view where = "stream_destroy()";
  CUstream stream = to_stream(s, where);
  if (is_default_stream(s)) {
    throw_error(Errc::value_error,
                std::string(where) + ": the default streams (1, 2) cannot be destroyed");
  }
  state_->current_context();
  CAI_DRIVER(*state_, cuStreamDestroy, stream);
}

void Backend::stream_synchronize(StreamHandle s) {
  BackendState& st = *state_;
  st.counts.stream_synchronize.bump();
  CUstream stream = to_stream(s, "stream_synchronize()");
  if (is_default_stream(s)) st.current_context();
  st.check(st.with_context([&] { return st.api.cuStreamSynchronize(stream); }),
           "cuStreamSynchronize");
}

bool Backend::stream_query(StreamHandle s) {
  BackendState& st = *state_;
  CUstream stream = to_stream(s, "stream_query()");
  if (is_default_stream(s)) st.current_context();
  const CUresult r = st.with_context([&] { return st.api.cuStreamQuery(stream); });
  if (r == CUDA_ERROR_NOT_READY) return false;
  st.check(r, "cuStreamQuery");
  return true;
}

int Backend::stream_device(StreamHandle s) {
  BackendState& st = *state_;
  CUstream stream = to_stream(s, "stream_device()");
  if (is_default_stream(s)) return st.current_ordinal();
  return st.context_device(st.stream_context(stream));
}

void Backend::launch_host_func(StreamHandle s, std::function<void()> fn) {
  BackendState& st = *state_;
  CUstream stream = to_stream(s, "launch_host_func()");
  if (is_default_stream(s)) st.current_context();
  auto* owned = new std::function<void()>(std::move(fn));
  const CUresult r = st.with_context([&] {
    return st.api.cuLaunchHostFunc(
        stream,
        [](void* user) noexcept {
          std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(user));
          // Nothing may escape to the driver's thread (std::terminate there), and nobody waits
          // for this call to report to: the error goes to stderr.
          try {
            (*f)();
          } catch (const std::exception& e) {
            std::fprintf(stderr, "cai: a host function (launch_host_func) threw: %s; ignored\n",
                         e.what());
          } catch (...) {
            std::fputs("cai: a host function (launch_host_func) threw; ignored\n", stderr);
          }
        },
        owned);
  });
  if (r != CUDA_SUCCESS) {
    delete owned;
    st.fail(r, "cuLaunchHostFunc");
  }
}

EventHandle Backend::event_create(bool timing) {
  BackendState& st = *state_;
  st.counts.event_create.bump();
  st.current_context();
  CUevent e = nullptr;
  CAI_DRIVER(st, cuEventCreate, &e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  return reinterpret_cast<std::uintptr_t>(e);
}

void Backend::event_destroy(EventHandle e) {
  state_->current_context();
  CAI_DRIVER(*state_, cuEventDestroy, to_event(e, "event_destroy()"));
}

void Backend::event_record(EventHandle e, StreamHandle s) {
  event_and_stream(*state_, state_->counts.event_record, e, s, true, "event_record()",
                   "cuEventRecord", [](const cu::DriverApi& api, CUevent event, CUstream stream) {
                     return api.cuEventRecord(event, stream);
                   });
}

void Backend::stream_wait_event(StreamHandle s, EventHandle e) {
  event_and_stream(*state_, state_->counts.stream_wait_event, e, s, false, "stream_wait_event()",
                   "cuStreamWaitEvent",
                   [](const cu::DriverApi& api, CUevent event, CUstream stream) {
                     return api.cuStreamWaitEvent(stream, event, 0);
                   });
}

void Backend::event_synchronize(EventHandle e) {
  BackendState& st = *state_;
  CUevent event = to_event(e, "event_synchronize()");
  st.check(st.with_context([&] { return st.api.cuEventSynchronize(event); }), "cuEventSynchronize");
}

bool Backend::event_query(EventHandle e) {
  BackendState& st = *state_;
  CUevent event = to_event(e, "event_query()");
  const CUresult r = st.with_context([&] { return st.api.cuEventQuery(event); });
  if (r == CUDA_ERROR_NOT_READY) return false;
  st.check(r, "cuEventQuery");
  return true;
}

float Backend::event_elapsed_ms(EventHandle start, EventHandle end) {
  constexpr std::string_view where = "event_elapsed_ms()";
  float ms = 0;
  state_->current_context();
  CAI_DRIVER(*state_, cuEventElapsedTime, &ms, to_event(start, where), to_event(end, where));
  return ms;
}

void Backend::synchronize() {
  BackendState& st = *state_;
  st.current_context();
  CAI_DRIVER(st, cuCtxSynchronize);
  st.frees.flush();  // what free_deferred queued no longer waits for anything
}

}  // namespace cai::device
