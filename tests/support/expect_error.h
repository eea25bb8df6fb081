// What the tests expect of errors: the message of the error an action throws, and text that
// contains a part (printing the whole text when it does not).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ooze::testing {

// Runs `action`, expects an E, and returns its message; a test failure and "" when it throws
// none.
template <class E = ConfigError, class Action>
std::string error_message_of(Action action) {
  try {
    action();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

}  // namespace ooze::testing

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)
