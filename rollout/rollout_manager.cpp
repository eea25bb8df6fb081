#include "rollout/rollout_manager.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "models/chat_template.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {

// ---------------------------------------------------------------------------------------------
// A round of concurrent generation: groups, the jobs that generate them, and what became of each
// group. Workers take jobs; the one that finishes a group's last job scores and judges it.

struct RolloutManager::Round {
  static constexpr int64_t kWholeGroup = -1;  // one request of n samples for a fresh group
  static constexpr int64_t kNothing = -2;     // the group needs no generation (complete)

  enum class Fate { kRunning, kKept, kDropped, kLeftOver };

  // Grows only while no job runs (before the workers start, or between rounds when all are
  // idle), so the references workers hold into it stay valid.
  std::vector<std::vector<Sample>> groups;
  std::vector<int64_t> pending_jobs;
  std::vector<Fate> fates;
  int64_t target = -1;  // stop once this many groups are kept; -1: run them all
  const GroupFilter* filter = nullptr;
  bool score = true;                       // score each group as it finishes
  const TeacherServer* teacher = nullptr;  // scores each kept group's samples

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<size_t, int64_t>> jobs;  // (group, sample or kWholeGroup / kNothing)
  bool closed = false;
  int64_t running = 0;
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  int64_t kept = 0;
  std::map<std::string, int64_t> drop_reasons;
  int64_t samples_total = 0;
  int64_t samples_done = 0;
  // The further samples a generate function split a conversation into, by group, each after
  // the sample it came from (group[i] stays put while other workers hold the group).
  std::map<size_t, std::vector<std::pair<size_t, std::vector<Sample>>>> split_off;

  bool needs_generation(const Sample& sample, int64_t budget) const {
    return (sample.status == Sample::Status::kPending ||
            sample.status == Sample::Status::kAborted) &&
           budget > 0;
  }

  // Queues the jobs of a new group; call with `mutex` held.
  void add_group(std::vector<Sample> group, const SampleGenerator& generator, bool per_sample) {
    const size_t g = groups.size();
    groups.push_back(std::move(group));
    fates.push_back(Fate::kRunning);
    std::vector<Sample>& samples = groups.back();
    samples_total += static_cast<int64_t>(samples.size());
    const bool fresh = std::all_of(samples.begin(), samples.end(), [](const Sample& s) {
      return s.response_length == 0 && s.status == Sample::Status::kPending;
    });
    int64_t count = 0;
    if (fresh && !per_sample) {
      jobs.emplace_back(g, kWholeGroup);
      count = 1;
    } else {
      for (size_t i = 0; i < samples.size(); ++i) {
        if (!needs_generation(samples[i], generator.remaining_budget(samples[i]))) continue;
        samples[i].status = Sample::Status::kPending;
        samples[i].abort_reason.clear();
        jobs.emplace_back(g, static_cast<int64_t>(i));
        ++count;
      }
    }
    if (count == 0) {
      jobs.emplace_back(g, kNothing);
      count = 1;
    }
    pending_jobs.push_back(count);
  }

  // Takes group g's split-off samples into it, each right after its sample. Call when no job of
  // group g runs.
  void merge_split_off(size_t g) {
    std::vector<std::pair<size_t, std::vector<Sample>>> pieces;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto found = split_off.find(g);
      if (found == split_off.end()) return;
      pieces = std::move(found->second);
      split_off.erase(found);
    }
    std::vector<Sample>& group = groups[g];
    std::vector<std::vector<Sample>> after(group.size());
    for (auto& [i, samples] : pieces) after[i] = std::move(samples);
    std::vector<Sample> merged;
    for (size_t i = 0; i < group.size(); ++i) {
      merged.push_back(std::move(group[i]));
      for (Sample& piece : after[i]) merged.push_back(std::move(piece));
    }
    group = std::move(merged);
  }
};

void RolloutManager::run(Round& round, SampleGenerator& generator) {
  if (cancelled_) {
    throw RolloutCancelled("rollout cancelled before it started: the job is stopping");
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const GenerationStats stats_at_start = generator.stats();

  auto abort_engines = [this] {
    for (const serving::BroadcastResult& result :
         router_.broadcast("/abort_request", {{"abort_all", true}})) {
      if (!result.ok()) {
        OOZE_LOG(WARN) << "rollout: abort_request to " << result.engine_url << " failed ("
                       << result.status << "): " << result.body;
      }
    }
  };

  // The end of a group's generation: score, judge, count. Runs on the worker that finished it.
  auto finish_group = [&](size_t g) {
    round.merge_split_off(g);
    std::vector<Sample>& group = round.groups[g];
    plugin::FilterDecision decision;
    if (!round.stop) {
      if (round.score) rewards_.score_group(group);
      if (round.filter) decision = round.filter->decide(group);
    }
    bool reached = false, kept = false;
    {
      std::lock_guard<std::mutex> lock(round.mutex);
      if (round.stop) {
        round.fates[g] = Round::Fate::kLeftOver;
      } else if (!decision.keep) {
        round.fates[g] = Round::Fate::kDropped;
        ++round.drop_reasons[decision.reason];
      } else if (round.target >= 0 && round.kept >= round.target) {
        round.fates[g] = Round::Fate::kLeftOver;  // finished while the last kept one did
      } else {
        round.fates[g] = Round::Fate::kKept;
        ++round.kept;
        kept = true;
        reached = round.target >= 0 && round.kept == round.target;
        if (reached) round.stop = true;
      }
    }
    if (reached) abort_engines();  // what still runs is not needed any more
    // Only what trains needs the teacher; the other groups generate meanwhile.
    if (kept && round.teacher) round.teacher->score(group);
  };

  auto work = [&] {
    while (true) {
      std::pair<size_t, int64_t> job;
      {
        std::unique_lock<std::mutex> lock(round.mutex);
        round.changed.wait(lock, [&] { return round.closed || !round.jobs.empty(); });
        if (round.jobs.empty()) return;
        job = round.jobs.front();
        round.jobs.pop_front();
        ++round.running;
      }
      const auto [g, which] = job;
      std::vector<Sample>& group = round.groups[g];
      int64_t samples = 0;
      bool group_done = false;
      try {
        if (which == Round::kWholeGroup) {
          generator.generate_group(group);
          samples = static_cast<int64_t>(group.size());
        } else if (which >= 0) {
          Sample& sample = group[static_cast<size_t>(which)];
          if ((functions_.python_generate || functions_.agent || functions_.env) && !round.stop) {
            std::vector<Sample> done = generate_sample(sample, generator, round.stop);
            sample = std::move(done.front());
            if (done.size() > 1) {
              std::lock_guard<std::mutex> lock(round.mutex);
              round.split_off[g].emplace_back(
                  static_cast<size_t>(which),
                  std::vector<Sample>(std::make_move_iterator(done.begin() + 1),
                                      std::make_move_iterator(done.end())));
            }
          } else if (functions_.generate && !round.stop) {
            functions_.generate->generate(generator, sample);
          } else {
            generator.generate(sample);
          }
          samples = 1;
        }
        std::lock_guard<std::mutex> lock(round.mutex);
        round.samples_done += samples;
        group_done = --round.pending_jobs[g] == 0;
      } catch (...) {
        std::lock_guard<std::mutex> lock(round.mutex);
        if (!round.error) round.error = std::current_exception();
        round.stop = true;
      }
      if (group_done) {
        try {
          finish_group(g);
        } catch (...) {
          std::lock_guard<std::mutex> lock(round.mutex);
          if (!round.error) round.error = std::current_exception();
          round.stop = true;
        }
      }
      {
        std::lock_guard<std::mutex> lock(round.mutex);
        --round.running;
      }
      round.changed.notify_all();
    }
  };

  size_t num_workers;
  {
    std::lock_guard<std::mutex> lock(round.mutex);
    num_workers =
        std::clamp<size_t>(round.jobs.size(), 1, static_cast<size_t>(options_.concurrency));
  }
  std::vector<std::thread> workers;
  for (size_t i = 0; i < num_workers; ++i) workers.emplace_back(work);

  int64_t rounds = 1;
  bool aborted_engines = false;
  Clock::time_point last_progress = start;
  Clock::time_point last_abort = start;
  std::unique_lock<std::mutex> lock(round.mutex);
  auto all_idle = [&] { return round.jobs.empty() && round.running == 0; };
  while (true) {
    // Wake when everything is idle (at once if it already is), when a stop still has to abort
    // the engines, or for the periodic duties below.
    round.changed.wait_for(lock, std::chrono::milliseconds(200),
                           [&] { return all_idle() || (round.stop && !aborted_engines); });
    if (cancelled_ && !round.stop) {
      round.error = std::make_exception_ptr(RolloutCancelled(
          "rollout cancelled with " + std::to_string(round.samples_done) + " of " +
          std::to_string(round.samples_total) + " samples done: the job is stopping"));
      round.stop = true;
    }
    const bool idle = all_idle();
    if (round.stop) {
      // Drain: queued jobs see the stop flag and end at once; running requests were aborted. A
      // request that started just after the abort is caught by the next one.
      if (idle) break;
      if (!aborted_engines || Clock::now() - last_abort > std::chrono::milliseconds(500)) {
        aborted_engines = true;
        last_abort = Clock::now();
        lock.unlock();
        abort_engines();
        lock.lock();
      }
      continue;
    }
    if (idle) {
      if (round.target < 0 || round.kept >= round.target) break;
      // Every group finished and too few were kept: draw another round.
      if (rounds >= options_.dynamic_sampling_max_rounds) {
        round.error = std::make_exception_ptr(Error(
            "dynamic sampling kept " + std::to_string(round.kept) + " of " +
            std::to_string(round.groups.size()) + " groups in " + std::to_string(rounds) +
            " rounds, short of --rollout-batch-size " + std::to_string(round.target) +
            " (--dynamic-sampling-filter-path " + options_.dynamic_sampling_filter_path +
            " drops too much; raise --over-sampling-batch-size or --dynamic-sampling-max-rounds)"));
        break;
      }
      ++rounds;
      lock.unlock();
      std::vector<std::vector<Sample>> more =
          draw_groups(std::max(options_.over_sampling_batch_size, options_.rollout_batch_size));
      lock.lock();
      for (std::vector<Sample>& group : more) {
        round.add_group(std::move(group), generator, functions_.generates_per_sample());
      }
      round.changed.notify_all();
      continue;
    }
    if (options_.progress_interval_s > 0 &&
        Clock::now() - last_progress >
            std::chrono::duration<double>(options_.progress_interval_s)) {
      last_progress = Clock::now();
      const double seconds = std::chrono::duration<double>(last_progress - start).count();
      const int64_t tokens = generator.stats().generated_tokens - stats_at_start.generated_tokens;
      OOZE_LOG(INFO) << "rollout: " << round.samples_done << "/" << round.samples_total
                     << " samples, " << static_cast<int64_t>(tokens / seconds) << " tokens/s"
                     << (round.target >= 0 ? ", kept " + std::to_string(round.kept) + "/" +
                                                 std::to_string(round.target) + " groups"
                                           : "");
    }
  }
  round.closed = true;
  round.stop = true;
  lock.unlock();
  round.changed.notify_all();
  for (std::thread& worker : workers) worker.join();
  for (size_t g = 0; g < round.groups.size(); ++g) round.merge_split_off(g);  // unfinished ones
  if (round.error) std::rethrow_exception(round.error);
}

std::vector<Sample> RolloutManager::generate_sample(const Sample& sample,
                                                    SampleGenerator& generator,
                                                    const std::atomic<bool>& stop) {
  if (functions_.env) return functions_.env->run(sample, generator);
  SessionAccess access;
  access.server = [this]() -> serving::SessionServer& { return sessions(); };
  const RolloutSampling& sampling = generator.sampling();
  access.settings.defaults = {{"temperature", sampling.temperature}, {"top_p", sampling.top_p}};
  if (sampling.top_k > 0) access.settings.defaults["top_k"] = sampling.top_k;
  if (!sampling.stop.empty()) access.settings.defaults["stop"] = sampling.stop;
  if (!sampling.stop_token_ids.empty()) {
    access.settings.defaults["stop_token_ids"] = sampling.stop_token_ids;
  }
  access.settings.max_completion_tokens = generator.remaining_budget(sample);
  access.settings.routing_key = "sample-" + std::to_string(sample.index);
  access.settings.stop = &stop;
  access.settings.on_call = [&generator](const nlohmann::json& output) { generator.count(output); };
  if (functions_.agent) {
    return functions_.agent->run(sample, sessions(), access.settings, tokenizer_, &stop);
  }
  return functions_.python_generate->generate(generator, tokenizer_, sample, &access);
}

serving::SessionServer& RolloutManager::sessions() {
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  if (sessions_) return *sessions_;
  const serving::RoutedResponse answer = router_.get_from_any("/get_model_info");
  const nlohmann::json model_info =
      nlohmann::json::parse(answer.response.body, nullptr, /*allow_exceptions=*/false);
  if (!answer.response.ok() || !model_info.is_object()) {
    throw Error("agent sessions: GET /get_model_info from " + answer.engine_url + " answered " +
                std::to_string(answer.response.status) + ": " + answer.response.body);
  }
  engine::EngineInfo info;
  info.model_path = model_info.value("model_path", "");
  info.served_model_name = model_info.value("served_model_name", "");
  info.context_length = model_info.value("context_length", int64_t{0});
  info.vocab_size = model_info.value("vocab_size", int64_t{0});
  info.eos_token_ids = model_info.value("eos_token_ids", std::vector<int64_t>{});
  std::string no_template_reason;
  try {
    session_template_ =
        std::make_unique<models::ChatTemplate>(models::select_chat_template(tokenizer_, ""));
  } catch (const std::exception& e) {
    no_template_reason = e.what();
  }
  serving::ServerOptions server;
  server.host = options_.session_host;
  server.threads = 4;
  sessions_ = std::make_unique<serving::SessionServer>(
      server, router_, tokenizer_, session_template_.get(), no_template_reason, std::move(info));
  OOZE_LOG(INFO) << "rollout: agent sessions at " << sessions_->base_url("ID");
  return *sessions_;
}

// ---------------------------------------------------------------------------------------------

RolloutManager::RolloutManager(RolloutOptions options, PromptSource& source,
                               serving::Router& router, const models::Tokenizer& tokenizer,
                               RewardModel& rewards)
    : options_(std::move(options)),
      source_(source),
      router_(router),
      tokenizer_(tokenizer),
      rewards_(rewards),
      functions_(RolloutFunctions::load(options_, rewards)),
      reward_watch_(options_.sampling, rewards.source(), rewards.options().reward_key) {
  if (functions_.data_source) functions_.data_source->build(hook_services(nullptr));
}

RolloutManager::~RolloutManager() = default;

HookServices RolloutManager::hook_services(SampleGenerator* generator) {
  HookServices services{generator, &tokenizer_, &rewards_};
  services.get_samples = [this](int64_t count) {
    std::vector<std::vector<Sample>> groups =
        options_.partial_rollout ? take_from_buffer(count) : std::vector<std::vector<Sample>>{};
    std::vector<std::vector<Sample>> fresh =
        draw_groups(count - static_cast<int64_t>(groups.size()));
    groups.insert(groups.end(), std::make_move_iterator(fresh.begin()),
                  std::make_move_iterator(fresh.end()));
    return groups;
  };
  services.add_samples = [this](std::vector<std::vector<Sample>> groups) {
    buffer_.insert(buffer_.end(), std::make_move_iterator(groups.begin()),
                   std::make_move_iterator(groups.end()));
  };
  return services;
}

std::vector<std::vector<Sample>> RolloutManager::draw_groups(int64_t count) {
  std::vector<std::vector<Sample>> groups;
  if (count <= 0) return groups;
  if (functions_.data_source) {
    return functions_.data_source->get_samples(count, hook_services(nullptr), [this](int64_t n) {
      return source_.take_sample_indices(n);
    });
  }
  for (const DrawnPrompt& drawn : source_.next_batch(count)) {
    const int64_t first = source_.take_sample_indices(options_.n_samples_per_prompt);
    std::vector<Sample> group;
    for (int64_t i = 0; i < options_.n_samples_per_prompt; ++i) {
      group.push_back(make_sample(drawn, first + i));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<std::vector<Sample>> RolloutManager::take_from_buffer(int64_t max_groups) {
  if (buffer_.empty() || max_groups <= 0) return {};
  if (functions_.buffer_filter || functions_.python_buffer_filter) {
    std::vector<std::vector<Sample>> taken;
    if (functions_.python_buffer_filter) {
      // The function removes what it takes from the buffer, in place, as in Slime.
      const nlohmann::json answer = functions_.python_buffer_filter->call(
          "filter_buffer", {{"buffer", groups_to_json(buffer_)}, {"num_samples", max_groups}});
      try {
        taken = groups_from_json(answer.at("taken"));
        buffer_ = groups_from_json(answer.at("buffer"));
      } catch (const FormatError& error) {
        throw PluginError("--buffer-filter-path " + options_.buffer_filter_path +
                          " handed back a sample ooze cannot take: " + error.what());
      }
    } else {
      taken = functions_.buffer_filter->filter_buffer(buffer_, max_groups);
    }
    if (static_cast<int64_t>(taken.size()) > max_groups) {
      throw PluginError("--buffer-filter-path " + options_.buffer_filter_path + " returned " +
                        std::to_string(taken.size()) + " groups; at most " +
                        std::to_string(max_groups) + " were asked for");
    }
    return taken;
  }
  const auto count = std::min<size_t>(buffer_.size(), static_cast<size_t>(max_groups));
  std::vector<std::vector<Sample>> taken(std::make_move_iterator(buffer_.begin()),
                                         std::make_move_iterator(buffer_.begin() + count));
  buffer_.erase(buffer_.begin(), buffer_.begin() + count);
  return taken;
}

int64_t RolloutManager::drop_buffered_older_than(int64_t version) {
  auto too_old = [&](const std::vector<Sample>& group) {
    for (const Sample& sample : group) {
      for (int64_t token_version : sample.weight_versions) {
        if (token_version >= 0 && token_version < version) return true;
      }
    }
    return false;
  };
  const size_t before = buffer_.size();
  buffer_.erase(std::remove_if(buffer_.begin(), buffer_.end(), too_old), buffer_.end());
  return static_cast<int64_t>(before - buffer_.size());
}

RolloutResult RolloutManager::generate_with_function(int64_t rollout_id) {
  const auto start = std::chrono::steady_clock::now();
  if (cancelled_)
    throw RolloutCancelled("rollout cancelled before it started: the job is stopping");
  // cancel() turns the function's later ooze.generate calls into aborts.
  SampleGenerator generator(router_, tokenizer_, options_.sampling, &cancelled_);
  PythonRollout rollout =
      functions_.rollout_function->generate(rollout_id, hook_services(&generator));
  // What the function left unscored gets the run's reward.
  for (std::vector<Sample>& group : rollout.groups) rewards_.score_group(group);
  if (rewards_.scores_whole_rollout()) rewards_.score_rollout(rollout.groups);
  const double teacher_start = teacher_ ? teacher_->busy_seconds() : 0.0;
  if (teacher_) {
    for (std::vector<Sample>& group : rollout.groups) teacher_->score(group);
  }
  RolloutResult result;
  result.rollout_id = rollout_id;
  result.groups = std::move(rollout.groups);
  result.metrics = rollout_metrics(result.groups, rewards_.options().reward_key);
  for (const auto& [key, value] : rollout.metrics) result.metrics[key] = value;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.metrics["perf/rollout_time"] = seconds;
  result.metrics["perf/rollout_tokens_per_sec"] = generator.stats().generated_tokens / seconds;
  if (teacher_) {
    result.metrics["perf/teacher_log_probs_time"] = teacher_->busy_seconds() - teacher_start;
  }
  watch_rewards(result, generator.stats());
  return result;
}

void RolloutManager::watch_rewards(const RolloutResult& result, const GenerationStats& stats) {
  if (auto warning = reward_watch_.observe(result.rollout_id, result.groups, stats)) {
    OOZE_LOG(WARN) << *warning;
  }
}

void RolloutManager::process_all_samples(const std::vector<std::vector<Sample>>& groups) {
  const HookBindings bindings("all-samples", hook_services(nullptr));
  functions_.all_samples_process->call(
      "process_all_samples", {{"generation", bindings.name()}, {"groups", groups_to_json(groups)}});
}

RolloutResult RolloutManager::generate(int64_t rollout_id) {
  if (functions_.rollout_function) return generate_with_function(rollout_id);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const int64_t batch = options_.rollout_batch_size;
  const int64_t first_round = std::max(options_.over_sampling_batch_size, batch);

  Round round;
  round.filter = functions_.filter ? &*functions_.filter : nullptr;
  // Stop early only when more groups run than the batch needs (over-sampling, or a filter that
  // may drop some); otherwise every group is kept and all must finish.
  round.target = (first_round > batch || round.filter) ? batch : -1;
  round.teacher = teacher_;
  const double teacher_start = teacher_ ? teacher_->busy_seconds() : 0.0;
  SampleGenerator generator(router_, tokenizer_, options_.sampling, &round.stop);

  std::vector<std::vector<Sample>> continued =
      options_.partial_rollout ? take_from_buffer(first_round) : std::vector<std::vector<Sample>>{};
  const int64_t continued_groups = static_cast<int64_t>(continued.size());
  std::vector<std::vector<Sample>> fresh =
      draw_groups(std::max<int64_t>(first_round - continued_groups, 0));
  {
    std::lock_guard<std::mutex> lock(round.mutex);
    for (auto* source : {&continued, &fresh}) {
      for (std::vector<Sample>& group : *source) {
        round.add_group(std::move(group), generator, functions_.generates_per_sample());
      }
    }
  }
  run(round, generator);
  if (functions_.all_samples_process) {
    std::vector<std::vector<Sample>> finished;
    for (size_t g = 0; g < round.groups.size(); ++g) {
      if (round.fates[g] == Round::Fate::kKept || round.fates[g] == Round::Fate::kDropped) {
        finished.push_back(round.groups[g]);
      }
    }
    process_all_samples(finished);
  }

  RolloutResult result;
  result.rollout_id = rollout_id;
  int64_t wasted_tokens = 0, dropped = 0, left_over = 0;
  auto response_tokens = [](const std::vector<Sample>& group) {
    int64_t tokens = 0;
    for (const Sample& sample : group) tokens += sample.response_length;
    return tokens;
  };
  for (size_t g = 0; g < round.groups.size(); ++g) {
    std::vector<Sample>& group = round.groups[g];
    switch (round.fates[g]) {
      case Round::Fate::kKept:
        result.groups.push_back(std::move(group));
        break;
      case Round::Fate::kDropped:
        ++dropped;
        wasted_tokens += response_tokens(group);
        break;
      case Round::Fate::kRunning:
      case Round::Fate::kLeftOver:
        ++left_over;
        if (options_.partial_rollout) {
          for (Sample& sample : group) sample.reward = nullptr;  // scored when it completes
          buffer_.push_back(std::move(group));
        } else {
          wasted_tokens += response_tokens(group);
        }
        break;
    }
  }
  std::sort(result.groups.begin(), result.groups.end(),
            [](const std::vector<Sample>& a, const std::vector<Sample>& b) {
              return a.front().group_index < b.front().group_index;
            });
  if (rewards_.scores_whole_rollout()) rewards_.score_rollout(result.groups);

  result.metrics = rollout_metrics(result.groups, rewards_.options().reward_key);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const GenerationStats stats = generator.stats();
  result.metrics["rollout/dynamic_filter/kept_groups"] = static_cast<double>(round.kept);
  result.metrics["rollout/dynamic_filter/dropped_groups"] = static_cast<double>(dropped);
  for (const auto& [reason, count] : round.drop_reasons) {
    result.metrics["rollout/dynamic_filter/drop_" + reason] = static_cast<double>(count);
  }
  result.metrics["rollout/aborted_groups"] = static_cast<double>(left_over);
  result.metrics["rollout/wasted_tokens"] = static_cast<double>(wasted_tokens);
  if (options_.partial_rollout) {
    result.metrics["rollout/partial/continued_groups"] = static_cast<double>(continued_groups);
    result.metrics["rollout/partial/buffered_groups"] = static_cast<double>(buffer_.size());
  }
  result.metrics["perf/rollout_time"] = seconds;
  result.metrics["perf/rollout_tokens_per_sec"] = stats.generated_tokens / seconds;
  result.metrics["perf/prefix_cache_hit_rate"] = stats.cache_hit_rate();
  if (teacher_) {
    result.metrics["perf/teacher_log_probs_time"] = teacher_->busy_seconds() - teacher_start;
  }
  if (static_cast<int64_t>(result.groups.size()) != batch) {
    throw Error("rollout " + std::to_string(rollout_id) + " kept " +
                std::to_string(result.groups.size()) + " groups instead of " +
                std::to_string(batch));
  }
  watch_rewards(result, stats);
  return result;
}

Evaluation RolloutManager::evaluate(
    const std::vector<std::pair<std::string, const PromptDataset*>>& datasets,
    const EvalOptions& options, int64_t rollout_id) {
  const auto start = std::chrono::steady_clock::now();
  Evaluation evaluation;
  MetricMap& metrics = evaluation.metrics;
  if (functions_.eval_function) {
    std::atomic<bool> stop{false};
    SampleGenerator generator(router_, tokenizer_, options.sampling, &stop);
    PythonEvaluation returned =
        functions_.eval_function->evaluate(rollout_id, hook_services(&generator));
    metrics = evaluation_metrics(returned, rewards_.options().reward_key, options.log_passrate);
    evaluation.data = std::move(returned.data);
    metrics["perf/eval_time"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return evaluation;
  }
  for (const auto& [name, dataset] : datasets) {
    Round round;
    SampleGenerator generator(router_, tokenizer_, options.sampling, &round.stop);
    {
      std::lock_guard<std::mutex> lock(round.mutex);
      for (int64_t p = 0; p < dataset->size(); ++p) {
        DrawnPrompt drawn;
        drawn.group_index = p;
        drawn.dataset_index = p;
        drawn.prompt = dataset->at(p);
        std::vector<Sample> group;
        for (int64_t i = 0; i < options.n_samples_per_eval_prompt; ++i) {
          group.push_back(make_sample(drawn, p * options.n_samples_per_eval_prompt + i));
        }
        round.add_group(std::move(group), generator, functions_.generates_per_sample());
      }
    }
    run(round, generator);
    if (rewards_.scores_whole_rollout()) rewards_.score_rollout(round.groups);
    MetricMap dataset_metrics =
        eval_metrics(name, round.groups, rewards_.options().reward_key, options.log_passrate);
    metrics.insert(dataset_metrics.begin(), dataset_metrics.end());
    EvalData& data = evaluation.data[name];
    for (std::vector<Sample>& group : round.groups) {
      for (Sample& sample : group) {
        data.rewards.push_back(sample.reward_value(rewards_.options().reward_key));
        data.truncated.push_back(sample.status == Sample::Status::kTruncated);
        data.samples.push_back(std::move(sample));
      }
    }
  }
  metrics["perf/eval_time"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return evaluation;
}

void RolloutManager::save_data_source(int64_t rollout_id) const {
  if (functions_.data_source) functions_.data_source->save(rollout_id);
}

void RolloutManager::load_data_source(int64_t rollout_id) const {
  if (functions_.data_source) functions_.data_source->load(rollout_id);
}

void RolloutManager::cancel() { cancelled_ = true; }

nlohmann::json RolloutManager::state() const {
  return {{"prompt_source", source_.state()}, {"partial_rollout_buffer", groups_to_json(buffer_)}};
}

void RolloutManager::restore(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("prompt_source") ||
      !state.contains("partial_rollout_buffer")) {
    throw FormatError(
        "rollout state: expected an object with prompt_source and partial_rollout_buffer");
  }
  std::vector<std::vector<Sample>> buffer = groups_from_json(state.at("partial_rollout_buffer"));
  source_.restore(state.at("prompt_source"), "rollout state");
  buffer_ = std::move(buffer);
}

}  // namespace ooze::rollout
