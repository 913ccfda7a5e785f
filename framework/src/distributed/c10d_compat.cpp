#include "distributed/c10d_compat.h"

#include <string_view>
#include <type_traits>
#include <utility>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace crucible::dist {
namespace {

template <typename Options, typename = void>
struct HasLibUvChoice : std::false_type {};
template <typename Options>
struct HasLibUvChoice<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>>
    : std::true_type {};

// A template, so that the branch naming useLibUV is discarded where the member does not exist.
template <typename Options>
c10::intrusive_ptr<c10d::TCPStore> open_store(const std::string& host, Options options) {
  if constexpr (HasLibUvChoice<Options>::value) {
    if (options.useLibUV) {
      try {
        return c10::make_intrusive<c10d::TCPStore>(host, options);
      } catch (const c10::Error& e) {
        // is_libuv_tcpstore_backend_available() is not exported; its refusal names libuv.
        if (std::string_view(e.what()).find("without libuv") == std::string_view::npos) throw;
      }
      options.useLibUV = false;
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const std::string& host,
                                                  c10d::TCPStoreOptions options) {
  return open_store(host, std::move(options));
}

void shut_down_nccl(Group& group) noexcept {
#if defined(USE_C10D_NCCL) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
  try {
    static_cast<c10d::ProcessGroupNCCL&>(group).shutdown();
  } catch (...) {
    // A group whose peers are gone may fail to shut down; the process is ending anyway.
  }
#else
  (void)group;
#endif
}

}  // namespace crucible::dist
