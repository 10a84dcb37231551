// What the console's POSTs do (docs/console.md#actions): one action on a workflow, a queue or a
// schedule, or a bulk action over the workflow list's filter, confirmed by the count and the
// fingerprint of its dry run. Each goes through the engine's own operations (the checks and the
// statements an application's call uses) and leaves a row in the audit table, written before
// it runs: an action whose row cannot be written is not done.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "durable/pg.hpp"

namespace durable {
class engine;
}

namespace durable::console_detail {

using ojson = nlohmann::ordered_json;
/// A request's query parameters (request.hpp).
using params = std::map<std::string, std::string>;

/// Who asks: the name given at sign-in ("token" for a request that carries the token), through
/// what, from which address. Written in the audit.
struct actor {
  std::string who, via = "console", address;
};

/// An action that does not apply to what it names now (a cancel of a finished workflow, a bulk
/// run over a set that changed since its dry run): 409, with the message and `extra` fields.
struct conflict : std::runtime_error {
  ojson extra = ojson::object();
  explicit conflict(const std::string& message, ojson e = ojson::object())
      : std::runtime_error(message), extra(std::move(e)) {}
};

/// The action's audit row could not be written, so nothing was done: 503 (it may be tried
/// again), with the cause in the message.
struct audit_unwritten : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A connection of the engine's pool whose statements end within a limit
/// (console_options::query_timeout); the pool's own deadline comes back when it goes.
class bounded_connection {
public:
  static asio::awaitable<bounded_connection> acquire(engine& eng, std::chrono::milliseconds limit);
  bounded_connection(bounded_connection&& o) noexcept
      : lease_(std::move(o.lease_)), before_(o.before_), owner_(std::exchange(o.owner_, false)) {}
  bounded_connection& operator=(bounded_connection&&) = delete;
  ~bounded_connection() {
    if (owner_) lease_->set_statement_timeout(before_);
  }
  pg::connection& operator*() const noexcept { return *lease_; }
  pg::connection* operator->() const noexcept { return lease_.operator->(); }

private:
  bounded_connection(pg::pool::lease l, std::chrono::milliseconds limit)
      : lease_(std::move(l)), before_(lease_->options().statement_timeout) {
    lease_->set_statement_timeout(limit);
  }
  pg::pool::lease lease_;
  std::chrono::milliseconds before_;
  bool owner_ = true;
};

/// The most workflows one bulk action acts on; a filter that matches more is refused.
inline constexpr std::int64_t bulk_limit = 10000;

/// The fingerprint of a set of ids (sorted): what a bulk run must find again to proceed.
std::string fingerprint(const std::vector<std::string>& sorted_ids);

/// POST /api/action: {action, id | queue | schedule, ...}. Throws bad_request (400), not_found
/// (404), conflict (409), or what the database threw.
/// `limit`: console_options::query_timeout, for the console's own statements.
asio::awaitable<ojson> run_action(engine& eng, const ojson& body, const actor& who,
                                  std::chrono::milliseconds limit);

/// POST /api/bulk: {action, filter, confirm?}. Without confirm a dry run: the count, the
/// fingerprint and a sample. With confirm {count, fingerprint}: runs the action on exactly that
/// set, or throws conflict when the filter matches another set now.
/// `check` runs before each workflow's action and throws to stop (the console has stopped).
asio::awaitable<ojson> run_bulk(engine& eng, const ojson& body, const actor& who,
                                std::chrono::milliseconds limit, std::int64_t max_page,
                                std::int64_t max_scan, std::function<void()> check);

/// The audit row of a sign-in (action 'sign_in'), written whole: result 'done' before its
/// session opens, or 'refused' with `detail` for a wrong token. Throws audit_unwritten when the
/// row cannot be written (a sign-in the audit cannot record opens no session).
asio::awaitable<void> audit_sign_in(engine& eng, std::chrono::milliseconds limit, actor who,
                                    std::string result, std::string detail);

/// GET /api/audit?limit=&before=&action=: {rows, next}.
/// Throws bad_request for a limit outside 1..max_page or a `before` that is not a number.
asio::awaitable<ojson> audit_page(engine& eng, std::chrono::milliseconds query_limit,
                                  const params& p, std::int64_t max_page);

}  // namespace durable::console_detail
