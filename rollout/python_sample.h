// Samples handed to Python hooks without JSON text: each field written straight into the dict
// ooze.Sample is built from (python/ooze/sample.py from_ooze), for hooks called on every sample.
//
//   hook.call_with_records("reward_each", samples.size(),
//                          [&](size_t i, python::RecordWriter& record) {
//                            write_sample(*samples[i], record);
//                          });
#pragma once

#include "python/python_hook.h"
#include "rollout/sample.h"

namespace ooze::rollout {

void write_sample(const Sample& sample, python::RecordWriter& record);

}  // namespace ooze::rollout
