// xtpu/kernels/thread_pool.hpp — the persistent workers a matmul splits its tiles over.
//
// Provides: kernels::detail::thread_pool::run(n, f) (below), work_observer / job_tag /
// job_tag_scope (what a trace sees of it), kernels::spin_us / set_spin_us. run(n, f) calls f(i) exactly once for every i in
// 0..n-1 and returns when all calls have finished. The caller takes part: it claims indices
// like any worker, so a job finishes even when every worker is busy — which is what makes
// nested jobs (f itself calling run) and jobs from several threads at once safe. Indices are
// claimed from one atomic counter per job, so no index runs twice whatever the timing. If some
// f(i) throws, the indices not yet claimed are skipped and run() rethrows the first exception
// in the caller; run() throws nothing else (but a bad XTPU_SPIN_US, below): it allocates
// nothing (the queue is a list through the jobs themselves), and a worker that cannot be
// created (std::system_error) leaves its share to the others and the caller. Workers are
// created on first use (up to n - 1). Waiting: an idle worker, and a caller whose indices are all claimed, yield the CPU in a loop
// for up to kernels::spin_us() µs (XTPU_SPIN_US, default 200; docs/benchmarks.md, "The thread
// pool's wait"), then sleep on a condition variable. 0: sleep at once (a machine shared with
// other programs). The thread that starts a job reads the setting first (config_error there
// for a bad XTPU_SPIN_US, at the first job of a program that made no tensor first); workers
// exist only after that read and read the current value each time they wait.
// A job's split never changes what any output element computes (each index is a fixed piece of
// the output, computed in k order by whichever thread claims it).
// Observing it (lazy/step.hpp's follow_trace installs one while a trace records, told by the
// trace recorder's listener()): work_observer() is
// called on each thread that ran indices of a job, once it has no more to claim and has let go
// of the job — when its first index started and its last ended, how many of the n indices it
// ran, and the job's tag (job_tag() of the thread that started the job; a thread running a
// job's indices has that tag, so nested jobs keep it). A job of one index runs on the caller
// and is not reported. Null (the default): one acquire load per job, a test per index.
// settle_reports() waits for the reports of jobs that have returned (a trace stopping).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "xtpu/settings.hpp"

namespace xtpu::kernels {
namespace detail {
inline constexpr settings::setting spin_setting{
    .name = "spin_us", .env = "XTPU_SPIN_US", .lo = 0, .hi = 1000000, .setter = "xtpu::kernels::set_spin_us"};
/// Measured: docs/benchmarks.md, "The thread pool's wait, bounded in time".
inline constexpr int default_spin_us = 200;
inline std::atomic<int>& spin_cell() {
  static std::atomic<int> cell{[] {
    if (const auto e = settings::from_env(spin_setting)) return static_cast<int>(settings::integer(spin_setting, *e));
    return default_spin_us;
  }()};
  return cell;
}
}  // namespace detail

/// How long a waiting thread of the pool spins before it sleeps, in µs (XTPU_SPIN_US, else 200).
inline int spin_us() { return detail::spin_cell().load(std::memory_order_relaxed); }
/// config_error unless 0 <= us <= 1000000; jobs started after it use the new budget.
inline void set_spin_us(int us) {
  detail::spin_cell().store(static_cast<int>(settings::integer(detail::spin_setting, us)), std::memory_order_relaxed);
}

}  // namespace xtpu::kernels

namespace xtpu::kernels::detail {

/// What the pool reports of a thread's share of a job (see the top of this file).
struct work_report {
  std::chrono::steady_clock::time_point begin, end;
  int ran, n, tag;
  bool caller;  // the thread that started the job
};
using work_observer_fn = void (*)(const work_report&);
inline std::atomic<work_observer_fn>& work_observer() noexcept {
  static std::atomic<work_observer_fn> f{nullptr};
  return f;
}
/// Workers between letting go of a job and handing its report to the observer.
inline std::atomic<int>& reports_in_flight() noexcept {
  static std::atomic<int> n{0};
  return n;
}
/// Returns once every report of a job whose run() has returned has reached the observer (a
/// trace that stops waits for them; a job still running reports later, or to nobody).
inline void settle_reports() noexcept {
  while (reports_in_flight().load(std::memory_order_acquire) != 0) std::this_thread::yield();
}
/// This thread's tag for the jobs it starts (a trace sets the device's track).
inline int& job_tag() noexcept {
  thread_local int tag = 0;
  return tag;
}

/// job_tag() is `tag` in this scope.
class job_tag_scope {
 public:
  explicit job_tag_scope(int tag) noexcept : saved_(job_tag()) { job_tag() = tag; }
  job_tag_scope(const job_tag_scope&) = delete;
  job_tag_scope& operator=(const job_tag_scope&) = delete;
  ~job_tag_scope() { job_tag() = saved_; }

 private:
  int saved_;
};

class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool p;
    return p;
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  template <class F>
  void run(int n, F&& f) {
    run_job(n, &call_part<std::remove_reference_t<F>>, const_cast<void*>(static_cast<const void*>(&f)));
  }
  /// run's thunk: one function per F (not a lambda and its conversions).
  template <class F>
  static void call_part(void* ctx, int i) {
    (*static_cast<F*>(ctx))(i);
  }

  ~thread_pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      stopping_.store(true, std::memory_order_relaxed);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  struct job {
    void (*fn)(void*, int) = nullptr;
    void* ctx = nullptr;
    int n = 0;
    std::atomic<int> next{0};      // the next unclaimed index
    std::atomic<int> finished{0};  // indices done (or skipped after an error)
    std::atomic<bool> failed{false};
    std::exception_ptr error;      // the first exception, written once by the thread that set failed
    int holders = 0;               // workers that may still touch this job (guarded by mu_)
    int tag = 0;                   // job_tag() of the thread that started it
    work_observer_fn observer = nullptr;
    job* newer = nullptr;          // the queue's links (guarded by mu_)
    bool queued = false;
  };

  thread_pool() = default;

  /// run()'s work, type-erased: one copy however many kernels call run, and one of each f.
  [[gnu::noinline]] void run_job(int n, void (*fn)(void*, int), void* ctx) {
    if (n <= 0) return;
    if (n == 1) return fn(ctx, 0);
    (void)spin_us();  // reads XTPU_SPIN_US on first use (config_error here): workers, made after, never throw from it
    job j;
    j.n = n;
    j.fn = fn;
    j.ctx = ctx;
    j.tag = job_tag();
    j.observer = work_observer().load(std::memory_order_acquire);
    {
      std::lock_guard lock(mu_);
      grow(n - 1);
      enqueue(&j);
    }
    cv_.notify_all();
    report(j.observer, work_on(j, true));  // the caller claims indices too: progress without any free worker
    {
      std::unique_lock lock(mu_);
      dequeue(&j);
    }
    spin_for([&] { return finished(j); });  // the indices other threads claimed; then sleep
    {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return finished(j) && j.holders == 0; });
    }
    if (j.error) std::rethrow_exception(j.error);
  }

  /// Yields until ready() or spin_us() µs have passed (see the top of this file). Only run
  /// after run_job's first read of the setting, so the read cannot throw.
  template <class Ready>
  static void spin_for(Ready ready) noexcept {
    const int us = spin_us();
    if (us == 0 || ready()) return;
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    do std::this_thread::yield();
    while (!ready() && std::chrono::steady_clock::now() < end);
  }
  /// Called with each index drawn past j's last: the thread that draws j.n itself tells the
  /// pool that j has no index left to claim (a spinning worker stops waiting for it). False.
  bool note_exhausted(const job& j, int drawn) noexcept {
    if (drawn == j.n) claimable_.fetch_sub(1, std::memory_order_release);
    return false;
  }
  static bool finished(const job& j) noexcept { return j.finished.load(std::memory_order_acquire) == j.n; }

  /// Claims and runs indices of j until none is left; returns what it ran (for j's observer).
  work_report work_on(job& j, bool caller) noexcept {
    const job_tag_scope tag(j.tag);
    const bool timed = j.observer != nullptr;
    work_report r{{}, {}, 0, j.n, j.tag, caller};
    for (int i; (i = j.next.fetch_add(1, std::memory_order_relaxed)) < j.n || note_exhausted(j, i);) {
      if (!j.failed.load(std::memory_order_acquire)) {
        if (timed && r.ran == 0) r.begin = std::chrono::steady_clock::now();
        ++r.ran;
        try {
          j.fn(j.ctx, i);
        } catch (...) {
          if (!j.failed.exchange(true, std::memory_order_acq_rel)) j.error = std::current_exception();
        }
        if (timed) r.end = std::chrono::steady_clock::now();
      }
      j.finished.fetch_add(1, std::memory_order_acq_rel);
    }
    return r;
  }
  /// Hands r to observer (null: nobody listens); a report that cannot be made (out of memory)
  /// is dropped, never the job.
  static void report(work_observer_fn observer, const work_report& r) noexcept {
    if (observer == nullptr || r.ran == 0) return;
    try {
      observer(r);
    } catch (...) {
    }
  }

  // the following run with mu_ held
  /// Up to n workers; one that cannot be created (no thread or no memory for it) is not
  /// waited for: the caller claims indices too, so the job finishes without it.
  void grow(int n) noexcept {
    try {
      while (static_cast<int>(workers_.size()) < n) workers_.emplace_back([this] { loop(); });
    } catch (...) {
    }
  }
  void enqueue(job* j) noexcept {
    (oldest_ ? newest_->newer : oldest_) = j;
    newest_ = j;
    j->queued = true;
    claimable_.fetch_add(1, std::memory_order_release);
  }
  void dequeue(job* j) noexcept {
    if (!j->queued) return;
    job** link = &oldest_;
    job* older = nullptr;
    while (*link != j) older = *link, link = &(*link)->newer;
    *link = j->newer;
    if (newest_ == j) newest_ = older;
    j->newer = nullptr;
    j->queued = false;
  }
  /// The oldest job with an unclaimed index (exhausted ones leave the queue), or null.
  job* take() noexcept {
    while (oldest_) {
      job* j = oldest_;
      if (j->next.load(std::memory_order_relaxed) < j->n) {
        ++j->holders;
        return j;
      }
      dequeue(j);
    }
    return nullptr;
  }

  void loop() {
    for (;;) {
      spin_for([&] { return claimable_.load(std::memory_order_acquire) != 0 || stopping_.load(std::memory_order_relaxed); });
      job* j = nullptr;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (j = take()) != nullptr; });
        if (!j) return;  // stop_
      }
      const work_observer_fn observer = j->observer;
      const work_report r = work_on(*j, false);
      const bool reports = observer != nullptr && r.ran > 0;
      if (reports) reports_in_flight().fetch_add(1, std::memory_order_relaxed);  // counted before run() can return
      {
        std::lock_guard lock(mu_);
        --j->holders;  // after this the caller may return and j may be gone
      }
      done_cv_.notify_all();
      if (reports) {  // after letting go: the caller does not wait for the trace
        report(observer, r);
        reports_in_flight().fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  job* oldest_ = nullptr;  // the queue: jobs linked oldest to newest through job::newer
  job* newest_ = nullptr;
  std::atomic<int> claimable_{0};  // jobs with an index no thread has drawn yet (what an idle worker waits for)
  std::atomic<bool> stopping_{false};
  bool stop_ = false;
};

}  // namespace xtpu::kernels::detail
