// Must NOT compile with GCC < 13 (the `gcc12_capture_check` test expects the static_assert of
// detail::check_step_function): a temporary closure owning a std::string, written inside
// co_await, is what GCC 12 corrupts. The named closure before it is accepted.
#include <durable.hpp>

asio::awaitable<std::string> greet_wf(durable::context& ctx, std::string who) {
  auto named = [who] { return "hello " + who; };
  std::string first = co_await ctx.step("named", named);
  co_return first + co_await ctx.step("temporary", [who] { return "hello " + who; });
}

int main() {}
