#include "comm/communicator.h"

namespace ooze {
namespace comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "sum";
    case ReduceOp::AVG:
      return "avg";
    case ReduceOp::MAX:
      return "max";
    case ReduceOp::MIN:
      return "min";
  }
  return "unknown";
}

}  // namespace comm
}  // namespace ooze
