// A value turned into the JSON text of its journal row, off the event loop when it is large.
//
// Encoding runs at tens of MB/s (nlohmann's dump escapes every character; a sanitized build
// is several times slower). On the loop, a 48 MiB output would stall the heartbeat, every
// other run and every timer of the engine for a second or more, and an executor with a short
// lease would lose it. A value whose size is seen to pass `offload_bytes` is encoded on a
// thread of its own, and the run waits for it as for any other I/O.
#pragma once

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "durable/codec.hpp"

namespace durable::detail {

/// Values seen to be at least this large (in bytes of JSON, roughly) are encoded off the loop.
/// A thread costs tens of microseconds to start; encoding this much costs milliseconds.
inline constexpr std::size_t offload_bytes = std::size_t(256) << 10;

/// A lower bound on the JSON text of `j`, walked until it passes `limit` (so a small value
/// costs a short walk, and a large one at most `limit` steps).
inline std::size_t json_weight(const nlohmann::json& j, std::size_t limit) {
  if (j.is_string()) return j.get_ref<const std::string&>().size() + 2;
  if (!j.is_structured()) return 4;  // no walk, no allocation for a scalar
  std::size_t total = 0;
  std::vector<const nlohmann::json*> todo{&j};
  while (!todo.empty() && total < limit) {
    const nlohmann::json* v = todo.back();
    todo.pop_back();
    if (v->is_string()) {
      total += v->get_ref<const std::string&>().size() + 2;
    } else if (v->is_object()) {
      for (auto it = v->begin(); it != v->end() && total < limit; ++it) {
        total += it.key().size() + 4;
        todo.push_back(&it.value());
      }
    } else if (v->is_array()) {
      for (auto it = v->begin(); it != v->end() && total < limit; ++it) {
        total += 1;
        todo.push_back(&*it);
      }
    } else if (v->is_binary()) {
      total += v->get_binary().size() * 2;
    } else {
      total += 4;
    }
  }
  return total;
}

/// What a value's JSON will at least weigh, known without encoding it: strings, and ranges
/// of them or of numbers (which cover byte buffers, vectors of records' ids, ...). 0 when the
/// type does not tell; such a value is judged by its encoded json_weight instead.
template <class T>
std::size_t known_weight(const T& v) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return std::string_view(v).size();
  } else if constexpr (std::ranges::sized_range<const T>) {
    using element = std::ranges::range_value_t<const T>;
    const auto n = static_cast<std::size_t>(std::ranges::size(v));
    if constexpr (std::is_arithmetic_v<element>) {
      return n * 2;
    } else if constexpr (std::is_convertible_v<const element&, std::string_view>) {
      std::size_t total = 0;
      for (const auto& e : v) {
        total += std::string_view(e).size() + 3;
        if (total >= offload_bytes) break;
      }
      return total;
    } else {
      return n;  // every element weighs at least a byte
    }
  } else {
    return 0;
  }
}

/// What the encoding thread and the awaiting run share: the job, and what it made.
template <class Job>
struct off_loop_job {
  explicit off_loop_job(Job j) : job(std::move(j)) {}
  Job job;
  std::string text;
  std::exception_ptr failed;
  std::atomic<bool> done{false};
};

/// Runs `job` on a thread of its own; the awaiting coroutine waits on an eventfd that the
/// thread signals. The thread touches nothing of the loop: it owns the job (shared) and a
/// duplicate of the eventfd, so an io_context torn down meanwhile (an engine destroyed, a
/// process shutting down) leaves it nothing dangling to reach. When no thread or descriptor
/// can be had, the job runs in place.
template <class Job>
asio::awaitable<std::string> run_off_loop(Job job) {
  auto shared = std::make_shared<off_loop_job<Job>>(std::move(job));
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int worker_fd = fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (worker_fd < 0) {
    if (fd >= 0) ::close(fd);
    co_return shared->job();
  }
  asio::posix::stream_descriptor ready(co_await asio::this_coro::executor, fd);
  try {
    std::thread([shared, worker_fd] {
      try {
        shared->text = shared->job();
      } catch (...) {
        shared->failed = std::current_exception();
      }
      shared->done.store(true, std::memory_order_release);
      const std::uint64_t one = 1;
      while (::write(worker_fd, &one, sizeof one) < 0 && errno == EINTR) {
      }
      ::close(worker_fd);
    }).detach();
  } catch (const std::system_error&) {
    ::close(worker_fd);
    co_return shared->job();
  }
  // Not cancellable: the value is the step's, and the encoding ends by itself.
  while (!shared->done.load(std::memory_order_acquire))
    co_await ready.async_wait(
        asio::posix::stream_descriptor::wait_read,
        asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable));
  if (shared->failed) std::rethrow_exception(shared->failed);
  co_return std::move(shared->text);
}

template <class T>
inline constexpr bool offloadable = std::is_move_constructible_v<T>&& std::is_move_assignable_v<T>;

/// The JSON text of `value` as journaled (codec<T>, then dump) when it can be made on the
/// loop: the common, small case, with no coroutine frame and no thread. nullopt when the value
/// is large; journal_text_off_loop then makes it, from `tree` when the JSON tree was made here.
/// Set on a thread whose runs must not take work off the loop: the test kit's harness, which
/// needs every run's work in its io_context to tell when they all wait on its virtual clock
/// (and has no heartbeat to keep).
inline thread_local bool encode_in_place = false;

template <class T>
std::optional<std::string> journal_text_here(const T& value,
                                             std::shared_ptr<nlohmann::json>& tree) {
  if (encode_in_place) return durable::encode<T>(value).dump();
  if constexpr (offloadable<T>) {
    if (known_weight(value) >= offload_bytes) return std::nullopt;
  }
  nlohmann::json j = durable::encode<T>(value);
  if (json_weight(j, offload_bytes) < offload_bytes) return j.dump();
  tree = std::make_shared<nlohmann::json>(std::move(j));
  return std::nullopt;
}

/// The text journal_text_here left: dumped from `tree`, or, without one, the whole of
/// `value` encoded on the thread (moved there and back).
template <class T>
asio::awaitable<std::string> journal_text_off_loop(T& value, std::shared_ptr<nlohmann::json> tree) {
  if constexpr (offloadable<T>) {
    if (!tree) {
      auto holder = std::make_shared<std::optional<T>>(std::move(value));
      // Given back whatever happens. (No guard object: GCC 12 destroys some locals of a
      // coroutine twice.)
      std::exception_ptr failed;
      std::string text;
      try {
        auto job = [holder] { return durable::encode<T>(**holder).dump(); };
        text = co_await run_off_loop(std::move(job));
      } catch (...) {
        failed = std::current_exception();
      }
      value = std::move(**holder);
      if (failed) std::rethrow_exception(failed);
      co_return text;
    }
  }
  auto job = [tree] { return tree->dump(); };
  co_return co_await run_off_loop(std::move(job));
}

/// Both in one: the JSON text of `value`, off the loop when the value is large.
template <class T>
asio::awaitable<std::string> journal_text(T& value) {
  std::shared_ptr<nlohmann::json> tree;
  if (auto text = journal_text_here(value, tree)) co_return std::move(*text);
  co_return co_await journal_text_off_loop(value, tree);
}

}  // namespace durable::detail
