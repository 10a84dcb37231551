// The console's request parameters: what a page may ask for, checked before anything reaches
// the database (pure functions; tests/test_console.cpp).
#pragma once

#include <algorithm>
#include <asio/awaitable.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "auth.hpp"
#include "durable/duration.hpp"
#include "durable/states.hpp"
#include "durable/store.hpp"

namespace durable::console_detail {

// A counting semaphore on the engine's strand: `free` places, and the requests waiting for one
// (each on a timer that never expires, cancelled to hand it a place).
struct gate_t {
  std::size_t free;
  std::deque<std::shared_ptr<asio::steady_timer>> waiting;

  asio::awaitable<void> enter() {
    if (free > 0) {
      --free;
      co_return;
    }
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                      asio::steady_timer::time_point::max());
    waiting.push_back(timer);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  void leave() {
    if (waiting.empty()) {
      ++free;
      return;
    }
    waiting.front()->cancel();  // the place goes to the first in line
    waiting.pop_front();
  }
};

using params = std::map<std::string, std::string>;

/// A request that asks for something that cannot be (400, with the message).
struct bad_request : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
/// Nothing has the id asked for (404).
struct not_found : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The name in a Host header, or in an allowed entry or a listen address (`bare_ipv6`: an IPv6
/// address may come without brackets there), in lower case, without its port or brackets;
/// nullopt when it is malformed (text after "]" that is not a port, a port that is not digits).
inline std::optional<std::string> host_name(std::string_view host, bool bare_ipv6) {
  auto port_ok = [](std::string_view rest) {  // "" or ":" followed by at most 5 digits
    if (rest.empty()) return true;
    if (rest.front() != ':' || rest.size() > 6) return false;
    for (const char c : rest.substr(1))
      if (c < '0' || c > '9') return false;
    return true;
  };
  if (host.empty()) return std::nullopt;
  std::string_view name = host;
  if (host.front() == '[') {
    const auto end = host.find(']');
    if (end == std::string_view::npos || !port_ok(host.substr(end + 1))) return std::nullopt;
    name = host.substr(1, end - 1);
  } else if (bare_ipv6 && std::count(host.begin(), host.end(), ':') > 1) {
    name = host;
  } else if (const auto colon = host.find(':'); colon != std::string_view::npos) {
    if (!port_ok(host.substr(colon))) return std::nullopt;
    name = host.substr(0, colon);
  }
  if (name.empty()) return std::nullopt;
  std::string lower(name);
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

/// Whether a request's Host header names this console: a loopback name, the listen address,
/// or one of `allowed` ("*": any), each with or without a port, in any case. A page of another
/// site that had its name resolve to 127.0.0.1 (DNS rebinding) sends its own name: refused.
inline bool host_allowed(std::string_view host, std::string_view listen,
                         const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (a == "*") return true;
  const auto name = host_name(host, false);
  if (!name) return false;
  if (*name == "localhost" || *name == "127.0.0.1" || *name == "::1") return true;
  if (host_name(listen, true) == name) return true;
  for (const auto& a : allowed)
    if (host_name(a, true) == name) return true;
  return false;
}

/// "90s", "15m", "2h", "7d" as seconds (the `durable` program's durations, but a unit is
/// needed: a plain number could be a time); nullopt when `text` is not a relative age.
inline std::optional<double> relative_age(std::string_view text) {
  return parse_duration(text, false);
}

/// Text that enters the console (a query's parameter, a field of a POST's body) must be UTF-8
/// without a NUL character: PostgreSQL text cannot hold one, and the text before it would name
/// something else (another workflow, another queue). Throws bad_request naming `what`.
inline void check_text(const std::string& what, std::string_view value) {
  if (const auto at = value.find('\0'); at != std::string_view::npos)
    throw bad_request(what + " holds a NUL character (at byte " + std::to_string(at) +
                      "): text with one is refused, and nothing was done");
  try {
    (void)nlohmann::json(std::string(value)).dump();  // throws on bytes that are not UTF-8
  } catch (const nlohmann::json::type_error&) {
    throw bad_request(what + " is not UTF-8 text: it was refused, and nothing was done");
  }
}

/// The deepest a POST's body may nest (the console's bodies nest two levels; a send's value a
/// few more): deeper is refused, so that no body costs the check more than its size.
inline constexpr int max_body_depth = 32;

/// check_text() of every string in a POST's body, object keys too, each named by its path
/// ("the field 'filter.id_prefix'"); a body that nests deeper than max_body_depth is refused.
inline void check_body_text(const nlohmann::ordered_json& j, const std::string& path = {},
                            int depth = 0) {
  if (depth > max_body_depth)
    throw bad_request("the body nests more than " + std::to_string(max_body_depth) +
                      " levels deep (at '" + path + "')");
  const auto name = [&] { return "the field '" + path + "'"; };
  if (j.is_string()) {
    check_text(name(), j.get_ref<const std::string&>());
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      const std::string at = path.empty() ? k : path + "." + k;
      check_text("the name of the field '" + at + "'", k);
      check_body_text(v, at, depth + 1);
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      check_body_text(j[i], path + "[" + std::to_string(i) + "]", depth + 1);
  }
}

/// The 503 of a request whose database did not answer: the deadline passed (`limit`,
/// console_options::query_timeout) or the connection failed, and why, in words; never where the
/// database is (host, port, database, user: libpq's message holds them).
inline std::string not_answering(const std::exception& e, std::chrono::milliseconds limit) {
  const std::string head = "the database is not answering: ";
  const std::string what = e.what();
  const auto has = [&](const char* part) { return what.find(part) != std::string::npos; };
  const auto* sql = dynamic_cast<const pg::sql_error*>(&e);
  if (dynamic_cast<const pg::statement_timeout*>(&e) || (sql && sql->sqlstate() == "57014"))
    return head + "a query of the console had no answer within " + std::to_string(limit.count()) +
           " ms (console_options::query_timeout); try again later";
  std::string why = "the connection to it failed";
  if (has("Connection refused"))
    why = "it refused the connection (is the server running?)";
  else if (has("timeout expired") || has("timed out"))
    why = "the connection timed out";
  else if (has("authentication failed") || has("no pg_hba.conf entry"))
    why = "it refused the console's credentials";
  else if (has("does not exist"))
    why = "the database or role of the console's connection settings does not exist";
  else if (has("too many clients") || has("remaining connection slots"))
    why = "it has no connection left for the console";
  else if (has("starting up") || has("shutting down"))
    why = "it is starting up or shutting down";
  else if (dynamic_cast<const pg::connection_lost*>(&e))
    why = "the connection to it was lost";
  return head + why + "; the console's host can tell more (durable stats, or psql)";
}

/// Why a POST's body is refused (400): it is not a JSON object, or a string in it fails
/// check_text(); nullopt when it may go on.
inline std::optional<std::string> refused_body(const nlohmann::ordered_json& body) {
  if (!body.is_object()) return "the body must be a JSON object";
  try {
    check_body_text(body);
  } catch (const bad_request& e) {
    return e.what();
  }
  return std::nullopt;
}

/// Whether a POST's Origin is this console: the Host it was sent to, or a name given in
/// `allowed_hosts` (a reverse proxy that rewrites Host keeps the browser's Origin).
inline bool origin_allowed(const std::string& origin, const std::string& host,
                           const std::vector<std::string>& allowed_hosts) {
  if (origin_matches(origin, host)) return true;
  const auto scheme = origin.find("://");
  if (scheme == std::string::npos) return false;
  const auto name = host_name(origin.substr(scheme + 3), false);
  if (!name) return false;
  for (const auto& a : allowed_hosts)
    if (a != "*" && host_name(a, true) == name) return true;
  return false;
}

/// The name a sign-in gives for the audit ("anonymous" when none): controls, bidirectional
/// controls and characters that show nothing written out as escapes (printable_name), cut to 80
/// bytes at a character's start. The body has passed refused_body(): it is UTF-8.
inline std::string signer_name(const nlohmann::ordered_json& body) {
  const auto name = body.find("name");
  if (name == body.end() || !name->is_string()) return "anonymous";
  std::string clean = detail::printable_name(name->get_ref<const std::string&>());
  if (clean.size() > 80) {
    std::size_t end = 80;
    while (end > 0 && (static_cast<unsigned char>(clean[end]) & 0xc0) == 0x80) --end;
    clean.resize(end);
  }
  const auto first = clean.find_first_not_of(' ');
  return first == std::string::npos ? "anonymous" : clean;
}

/// A request's query string as browsers and curl send it: pairs split at '&', a name and its
/// value at the first '=', "%XX" decoded, and every other character taken as it is (',', ':',
/// '/', '@', brackets, and '+', which a schedule run's id holds in its time's offset: as RFC 3986
/// reads it, not as a form's space; send a space as %20). The first pair of a name counts. Throws
/// bad_request for a '%' without two hex digits after it, and (check_text) for a name or value
/// that, decoded, holds a NUL or is not UTF-8.
inline params parse_query(std::string_view query) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const auto decode = [&](std::string_view raw) {
    std::string out;
    out.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      const char c = raw[i];
      if (c != '%') {
        out.push_back(c);
      } else if (i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        out.push_back(char(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
        i += 2;
      } else {
        throw bad_request("the query string is not valid: '%' at " + std::to_string(i) + " in '" +
                          detail::printable_name(raw) +
                          "' is not followed by two hex digits (send a '%' as %25)");
      }
    }
    return out;
  };
  params p;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    auto name = decode(pair.substr(0, eq));
    auto value = eq == std::string_view::npos ? std::string() : decode(pair.substr(eq + 1));
    check_text("the parameter '" + detail::printable_name(name) + "'", name);
    check_text("the parameter '" + detail::printable_name(name) + "'", value);
    p.emplace(std::move(name), std::move(value));
  }
  return p;
}

inline std::optional<std::string> optional_param(const params& p, const std::string& key) {
  const auto it = p.find(key);
  if (it == p.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

inline std::string required(const params& p, const std::string& key) {
  auto v = optional_param(p, key);
  if (!v) throw bad_request("the parameter '" + key + "' is required");
  return *v;
}

/// A stream's offset given as parameter `key` (0 when absent): a whole number from 0 up.
inline std::int64_t offset_param(const params& p, const std::string& key) {
  const auto v = optional_param(p, key);
  if (!v) return 0;
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < 0)
    throw bad_request(key + ": '" + *v + "' is not an offset (a whole number from 0 up)");
  return n;
}

/// The values the stream page reads at most in one request (it reads on from `next`).
inline constexpr int stream_page = 500;

/// The workflow list's filter from the page's parameters: status (comma-separated), name, queue,
/// executor, id_prefix, since and until (a relative age such as 15m, or a timestamp the server
/// reads), cursor (the previous page's "next") and limit (1..max_page, 50 when absent).
/// The longest text a list searches for (`text`): a customer's order number, an email, an error.
inline constexpr std::size_t max_search_text = 200;

inline store::list_filter list_filter_of(const params& p, std::int64_t max_page) {
  store::list_filter f;
  if (auto s = optional_param(p, "status")) {
    std::string_view rest = *s;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const auto one = rest.substr(0, comma);
      if (!one.empty()) {
        bool known = false;
        for (auto w : all_workflow_states) known = known || to_string(w) == one;
        if (!known) {
          std::string names;
          for (auto w : all_workflow_states)
            names += (names.empty() ? "" : ", ") + std::string(to_string(w));
          throw bad_request("unknown status '" + std::string(one) + "'; one of: " + names);
        }
        f.statuses.emplace_back(one);
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  f.name = optional_param(p, "name");
  f.queue = optional_param(p, "queue");
  f.executor = optional_param(p, "executor");
  f.id_prefix = optional_param(p, "id_prefix");
  if (auto since = optional_param(p, "since")) {
    if (auto age = relative_age(*since))
      f.since_s = age;
    else
      f.since_at = since;
  }
  if (auto until = optional_param(p, "until")) {
    if (auto age = relative_age(*until))
      f.until_s = age;
    else
      f.until_at = until;
  }
  if (auto changed = optional_param(p, "changed_since")) {
    f.changed_since_s = relative_age(*changed);
    if (!f.changed_since_s)
      throw bad_request("changed_since: '" + *changed +
                        "' is not an age; give how long ago, for example 30m, 1h or 7d");
  }
  if (auto retrying = optional_param(p, "retrying")) {
    if (*retrying != "1" && *retrying != "true" && *retrying != "0" && *retrying != "false")
      throw bad_request("retrying: '" + *retrying + "' is not 1, true, 0 or false");
    f.retrying = *retrying == "1" || *retrying == "true";
  }
  if (auto text = optional_param(p, "text")) {
    if (text->size() > max_search_text)
      throw bad_request("text: the search text has " + std::to_string(text->size()) +
                        " bytes; at most " + std::to_string(max_search_text) + " are searched for");
    f.text = std::move(*text);
  }
  if (auto limit = optional_param(p, "limit")) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(limit->data(), limit->data() + limit->size(), n);
    if (ec != std::errc() || end != limit->data() + limit->size() || n < 1 || n > max_page)
      throw bad_request("limit: '" + *limit + "' is not a number of rows from 1 to " +
                        std::to_string(max_page));
    f.limit = n;
  }
  if (auto cursor = optional_param(p, "cursor")) {
    const auto bar = cursor->find('|');
    if (bar == std::string::npos || bar == 0)
      throw bad_request("cursor: '" + *cursor +
                        "' is not a cursor; pass the 'next' of the "
                        "previous page");
    f.after_created_at = cursor->substr(0, bar);
    f.after_id = cursor->substr(bar + 1);
  }
  return f;
}

/// console_options::max_scan must let a list request read something.
inline void require_scan(std::int64_t max_scan) {
  if (max_scan < 1)
    throw std::invalid_argument("console: max_scan is " + std::to_string(max_scan) +
                                "; it must be 1 or more (rows of a status a list request reads)");
}

/// The workflow list's answer {rows, next, searched} from admin_list's rows for a request of
/// `limit` rows (admin_list was asked for limit + 1, `scan` rows of each status at most). A last
/// row {"scanned_to": ...} means a status had more: the rows are whole down to that edge, and
/// unless the page is full anyway, the next page starts from it and `searched` says so
/// ({to: its time, rows: scan}). Otherwise the next page starts after the last row shown.
inline nlohmann::ordered_json list_page(std::vector<nlohmann::ordered_json> found,
                                        std::int64_t limit, std::int64_t scan) {
  using ojson = nlohmann::ordered_json;
  ojson edge = nullptr;
  if (!found.empty() && found.back().contains("scanned_to")) {
    edge = std::move(found.back().at("scanned_to"));
    found.pop_back();
  }
  const auto cursor_of = [](const ojson& row) {
    return row.at("created_at").get<std::string>() + "|" + row.at("id").get<std::string>();
  };
  ojson next = nullptr, searched = nullptr;
  if (std::int64_t(found.size()) > limit) {
    found.resize(std::size_t(limit));
    next = cursor_of(found.back());
  } else if (!edge.is_null()) {
    next = cursor_of(edge);
    searched = ojson{{"to", edge.at("created_at")}, {"rows", scan}};
  }
  return ojson{
      {"rows", std::move(found)}, {"next", std::move(next)}, {"searched", std::move(searched)}};
}

}  // namespace durable::console_detail
