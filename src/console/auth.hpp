// Who may act through the console (docs/console.md#security): the token, the sessions a sign-in
// opens (an HttpOnly cookie, in memory only), the per-session token against cross-site request
// forgery, and the checks on a POST's Origin. Pure code, tested without a server (replay_tests
// "console: ...").
#pragma once

#include <sys/random.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace durable::console_detail {

/// `n` random bytes from the kernel as 2n hexadecimal digits.
inline std::string random_hex(std::size_t n) {
  std::string bytes(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const auto r = ::getrandom(bytes.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("console: the kernel gave no random bytes for a session");
    }
    got += std::size_t(r);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (const char c : bytes) {
    out.push_back(hex[(static_cast<unsigned char>(c) >> 4) & 15]);
    out.push_back(hex[static_cast<unsigned char>(c) & 15]);
  }
  return out;
}

/// Compares in time that depends on the lengths only, not on where the texts differ.
inline bool same_secret(std::string_view a, std::string_view b) noexcept {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = a.size() < b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

/// The token as read from a token file: surrounding white space (a final newline) removed.
/// Throws std::invalid_argument when it is too short to resist guessing.
inline std::string checked_token(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  const std::string token = first == std::string_view::npos
                                ? std::string()
                                : std::string(text.substr(first, last - first + 1));
  if (token.size() < 16)
    throw std::invalid_argument(
        "console: the token has " + std::to_string(token.size()) +
        " characters; use at least 16 (for example: head -c 24 /dev/urandom | base64)");
  for (const char c : token)
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      throw std::invalid_argument(
          "console: the token holds a space or a control character; use printable characters");
  return token;
}

/// The value of cookie `name` in a Cookie header ("a=1; b=2"), if present.
inline std::optional<std::string> cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const auto end = header.find(';');
    std::string_view part = header.substr(0, end);
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) continue;
    if (part.substr(0, eq) == name) return std::string(part.substr(eq + 1));
  }
  return std::nullopt;
}

/// Whether a POST's Origin header ("http://127.0.0.1:8080") names the host the request was sent
/// to (its Host header). Browsers send Origin on every cross-site POST; a request without one
/// (a script's) is judged by its credentials alone.
inline bool origin_matches(std::string_view origin, std::string_view host) {
  std::string_view rest = origin;
  if (rest.rfind("http://", 0) == 0)
    rest.remove_prefix(7);
  else if (rest.rfind("https://", 0) == 0)
    rest.remove_prefix(8);
  else
    return false;  // "null" (a sandboxed frame, a file) or another scheme
  if (rest.find('/') != std::string_view::npos) return false;
  auto lower = [](std::string_view t) {
    std::string out(t);
    for (auto& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  return !host.empty() && lower(rest) == lower(host);
}

/// The sessions that signing in opens: a random id (the cookie) to who signed in and the
/// session's token against forgery. In memory: a restart signs everybody out. A session ends
/// after `idle` without a request; at most `max` live at once (the oldest ends first).
class sessions {
public:
  using clock = std::chrono::steady_clock;
  struct session {
    std::string who, csrf;
    clock::time_point used;
  };

  explicit sessions(std::chrono::seconds idle = std::chrono::hours(12), std::size_t max = 1000)
      : idle_(idle), max_(max) {}

  /// Opens a session for `who`; its id.
  std::string open(std::string who, clock::time_point now = clock::now()) {
    expire(now);
    while (by_id_.size() >= max_) {
      auto oldest = by_id_.begin();
      for (auto it = by_id_.begin(); it != by_id_.end(); ++it)
        if (it->second.used < oldest->second.used) oldest = it;
      by_id_.erase(oldest);
    }
    std::string id = random_hex(32);
    by_id_[id] = session{std::move(who), random_hex(32), now};
    return id;
  }

  /// The live session with this id (and marks it used), or null.
  const session* find(const std::string& id, clock::time_point now = clock::now()) {
    expire(now);
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return nullptr;
    it->second.used = now;
    return &it->second;
  }

  void close(const std::string& id) { by_id_.erase(id); }
  [[nodiscard]] std::size_t size() const noexcept { return by_id_.size(); }

private:
  void expire(clock::time_point now) {
    for (auto it = by_id_.begin(); it != by_id_.end();)
      it = now - it->second.used > idle_ ? by_id_.erase(it) : std::next(it);
  }

  std::chrono::seconds idle_;
  std::size_t max_;
  std::map<std::string, session> by_id_;
};

}  // namespace durable::console_detail
