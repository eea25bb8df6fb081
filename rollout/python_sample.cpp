#include "rollout/python_sample.h"

#include "rollout/sample_fields.h"

namespace ooze::rollout {

void write_sample(const Sample& sample, python::RecordWriter& record) {
  visit_sample_fields(sample,
                      [&](const char* name, const auto& value) { record.add(name, value); });
}

}  // namespace ooze::rollout
