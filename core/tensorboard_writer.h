// Metrics as TensorBoard event files, beside the JSON Lines of core/metrics.h, so a run's curves
// open in TensorBoard (`tensorboard --logdir DIR`) under the same names (`train/pg_loss`, ...).
//
//   TensorBoardWriter tensorboard(out_dir + "/tensorboard");
//   tensorboard.add_scalars(step, {{"rollout/raw_reward", 0.4}, {"train/pg_loss", 0.12}});
//   tensorboard.add_text(0, "config", "```json\n" + config.dump(2) + "\n```");
//
// Each writer creates a new file, events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>.<n>
// (n counts writers in the process), never reusing an existing name: a resumed run adds a file
// to the directory and TensorBoard reads all of them in name order. A file is a sequence of
// TFRecords (length, masked CRC-32C of the length, a serialized tensorboard.Event, masked
// CRC-32C of the Event); the first Event holds file_version "brain.Event:2".
//
// Scalars are stored as float32 (TensorBoard's simple_value). Non-finite values are kept: NaN
// and +-Inf are written as such, because a loss that became NaN is what the curve must show
// (TensorBoard marks them); finite values beyond float32's range become +-Inf.
//
// Every call writes its record to the file at once (one write(2), no buffer), so TensorBoard
// sees it while the run goes on and a crash loses at most the record being written. Safe to call
// from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ooze {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it, holding the file_version record.
  // Throws IoError naming the directory or file when either cannot be created or written.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // syncs and closes the file
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding every value under its name as tag. `wall_time` is seconds since
  // the Unix epoch. Throws Error for an empty name, IoError when the file cannot be written.
  void add_scalars(int64_t step, const std::map<std::string, double>& values,
                   double wall_time = unix_time_now());

  // `text` under `tag` for TensorBoard's text plugin (which renders it as Markdown).
  void add_text(int64_t step, const std::string& tag, const std::string& text,
                double wall_time = unix_time_now());

  // Asks the operating system to put what was written on disk (fsync); writes are already in
  // the file when add_* returns.
  void flush();

  // The event file this writer appends to.
  const std::string& path() const { return path_; }

  // Seconds since the Unix epoch, with sub-second precision.
  static double unix_time_now();

 private:
  void write_event(const std::string& serialized_event);

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole records in the file
  bool torn_ = false;  // a failed write left a partial record that could not be cut off
  std::mutex mutex_;
};

// For a run that does steps again: rewrites the event files in `dir`, all but `except` (the new
// writer's own), without the events `drop` selects, called with each event's step and tags.
// TensorBoard would draw both copies of a step written twice (its purge of orphaned data is
// global across tags, which would erase good points here, where train lines count optimizer
// steps and the others rollouts). Records after one a crash cut short are dropped too; each
// changed file is replaced atomically, the others are not touched. Returns the events dropped.
// Throws IoError naming the file when one cannot be read or replaced.
int64_t drop_tensorboard_events(
    const std::string& dir, const std::string& except,
    const std::function<bool(int64_t step, const std::vector<std::string>& tags)>& drop);

}  // namespace ooze
