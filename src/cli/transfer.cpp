// The `durable` program's verbs that move journals between databases: export (a workflow, and
// its descendants, as one versioned JSON document) and import (such a document loaded as new
// workflows, the unfinished ones parked until resumed). The document is what
// durable::testing::replay checks the current code against (docs/testing.md).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "cli.hpp"

namespace durable_cli {

namespace {

std::string read_all(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw failure(bad_usage, "import: cannot open '" + one_line(path) + "' to read it");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

int cmd_export(session& s, const settings&, const std::string& id, bool children,
               const std::string& output) {
  auto found = s.rows(s.st().admin_export(id, children));
  if (found.empty()) s.unknown(id);
  const std::string text = found[0].dump(2) + "\n";
  if (output.empty() || output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return done;
  }
  std::ofstream f(output, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(text.data(), std::streamsize(text.size())) || !f.flush())
    throw failure(not_done, "export: cannot write '" + one_line(output) + "'");
  std::fprintf(stderr, "exported %zu workflow(s) of '%s' to %s\n", found[0]["workflows"].size(),
               one_line(id).c_str(), one_line(output).c_str());
  return done;
}

ojson read_import(const std::string& file, const std::string& new_id) {
  const std::string text = read_all(file);
  ojson doc;
  try {
    doc = ojson::parse(text);
  } catch (const ojson::exception& e) {
    throw failure(bad_usage, "import: '" + one_line(file) + "' is not JSON: " + e.what());
  }
  if (!doc.is_object() || doc.value("format", std::string()) != "durable.journal")
    throw failure(bad_usage, "import: '" + one_line(file) +
                                 "' is not a journal made by 'durable export' (no \"format\": "
                                 "\"durable.journal\")");
  if (doc.value("version", 0) != 1)
    throw failure(bad_usage, "import: '" + one_line(file) + "' is version " +
                                 text_of(doc["version"]) +
                                 " of the journal format; this program reads version 1");
  if (!doc["root"].is_string() || !doc["workflows"].is_array() || doc["workflows"].empty())
    throw failure(bad_usage, "import: '" + one_line(file) + "' names no root or no workflows");
  if (!new_id.empty() && new_id.find('/') != std::string::npos)
    throw failure(bad_usage, "import: --id must not contain '/' (it separates a child's id)");
  return doc;
}

int cmd_import(session& s, const settings& g, const ojson& doc, const std::string& new_id) {
  const std::string root = doc["root"].get<std::string>();
  const std::string here = new_id.empty() ? root : new_id;
  const std::string reason = "imported from an export of '" + root + "' made at " +
                             text_of(doc.value("exported_at", ojson())) +
                             "; it runs once resumed (durable resume " + here + ")";
  std::optional<std::string> rename;
  if (!new_id.empty()) rename = new_id;
  auto load = [&]() -> asio::awaitable<durable::store::import_outcome> {
    auto q = s.st().admin_import(doc.dump(), rename, reason);
    auto c = co_await s.eng.pool().acquire();
    auto r = co_await durable::store::fetch_one(*c, std::move(q));
    co_return r.value_or(durable::store::import_outcome{});
  };
  const durable::store::import_outcome r = run(s.io, load());
  if (r.workflows == 0)
    throw failure(not_done, "import: a workflow of '" + one_line(here) + "' (or one of its " +
                                "children) exists already in schema '" +
                                one_line(s.eng.schema_name()) +
                                "'; nothing was imported. Give the root another id with --id");
  ojson extra = {{"workflows", r.workflows}, {"rows", r.rows}};
  print_action(g, "import", r.id,
               "imported '" + one_line(r.id) + "' (" + std::to_string(r.workflows) +
                   " workflow(s), " + std::to_string(r.rows) +
                   " rows); unfinished, it is parked until 'durable resume " + one_line(r.id) +
                   "' (its unfinished children are due at once)",
               extra);
  return done;
}

}  // namespace durable_cli
