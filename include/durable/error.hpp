// The exception hierarchy. Every error the library raises derives from durable::error and
// says what happened, to which workflow and step, and what to do about it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace durable {

/// Base of every exception the library throws.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A value could not be encoded to, or decoded from, its journal representation.
/// `type()` names the C++ type involved.
class codec_error : public error {
public:
  codec_error(std::string type, const std::string& what) : error(what), type_(std::move(type)) {}
  [[nodiscard]] const std::string& type() const noexcept { return type_; }

private:
  std::string type_;
};

}  // namespace durable
