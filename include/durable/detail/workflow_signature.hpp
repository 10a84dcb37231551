// What register_workflow() accepts: the signature of a workflow callable, read from a function,
// a function pointer or an object with one operator(). Machinery of durable/engine.hpp.
#pragma once

#include <asio/awaitable.hpp>
#include <tuple>
#include <type_traits>

#include "durable/fwd.hpp"

namespace durable::detail {

/// The signature of a workflow callable: asio::awaitable<R>(context&, Args...).
template <class Sig>
struct workflow_signature {
  static constexpr bool valid = false;
};
template <class R, class... Args>
struct workflow_signature<asio::awaitable<R>(context&, Args...)> {
  static constexpr bool valid = true;
  using result = R;
  using args = std::tuple<Args...>;
};

/// The call signature of a function, function pointer, or object with one operator().
template <class F, class = void>
struct call_signature {
  using type = void;
};
template <class R, class... A>
struct call_signature<R (*)(A...), void> {
  using type = R(A...);
};
template <class R, class... A>
struct call_signature<R (*)(A...) noexcept, void> {
  using type = R(A...);
};
template <class M>
struct member_call_signature {
  using type = void;
};
#define DURABLE_MEMBER_SIGNATURE(QUALIFIERS)                \
  template <class R, class C, class... A>                   \
  struct member_call_signature<R (C::*)(A...) QUALIFIERS> { \
    using type = R(A...);                                   \
  };
DURABLE_MEMBER_SIGNATURE()
DURABLE_MEMBER_SIGNATURE(const)
DURABLE_MEMBER_SIGNATURE(noexcept)
DURABLE_MEMBER_SIGNATURE(const noexcept)
DURABLE_MEMBER_SIGNATURE(&)
DURABLE_MEMBER_SIGNATURE(const&)
#undef DURABLE_MEMBER_SIGNATURE
template <class F>
struct call_signature<F, std::void_t<decltype(&F::operator())>>
    : member_call_signature<decltype(&F::operator())> {};

template <class F>
using workflow_signature_of = workflow_signature<typename call_signature<std::decay_t<F>>::type>;

}  // namespace durable::detail
