// Editing a connection string (keeping the caller's URL or key=value form working).
#pragma once

#include <libpq-fe.h>

#include <string>

namespace test {

/// `conninfo` with `key` set to `value`, as a key='value' string.
inline std::string with_option(const std::string& conninfo, const std::string& key,
                               const std::string& value) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!opts) {
    if (err) PQfreemem(err);
    return conninfo;
  }
  auto quote = [](const std::string& v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\'' || c == '\\') q += '\\';
      q += c;
    }
    return q + "'";
  };
  std::string out;
  for (PQconninfoOption* o = opts; o->keyword; ++o)
    if (o->val && key != o->keyword) out += std::string(o->keyword) + "=" + quote(o->val) + " ";
  PQconninfoFree(opts);
  return out + key + "=" + quote(value);
}

}  // namespace test
