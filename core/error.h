// The root of every error ooze throws. Messages say what was wrong, where, and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace ooze {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config file or command-line flag that ooze cannot accept.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file that exists but whose content is malformed (safetensors, JSON, ...).
class FormatError : public Error {
 public:
  using Error::Error;
};

// Opening, reading or writing a file failed at the operating-system level.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace ooze
