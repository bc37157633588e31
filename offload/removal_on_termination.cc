#include "offload/removal_on_termination.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace zb {

namespace {

constexpr size_t kSlots = 64;
constexpr size_t kPathBytes = 4096;

// A slot is written only while `used` is false; the handler reads the slots whose `used` is true.
struct Slot {
  std::atomic<bool> used{false};
  char path[kPathBytes] = {};
};
std::array<Slot, kSlots> slots;
std::mutex slots_mutex;  // between registering threads; the handler takes no lock

std::atomic<volatile std::sig_atomic_t*> interrupt_flag{nullptr};

void unlink_registered() {
  for (Slot& slot : slots)
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.path);
}

extern "C" void remove_and_end(int signal_number) {
  // A program that stops gracefully takes the first SIGINT or SIGTERM as a request to stop after the step in
  // progress. SIGTERM is how mpirun passes a Ctrl-C on to the ranks (and how MPI_Abort ends the others, which
  // may then be stuck in a collective until mpirun's SIGKILL): the files go at once, since their open
  // descriptors keep them usable for as long as the run goes on.
  volatile std::sig_atomic_t* flag = interrupt_flag.load();
  if ((signal_number == SIGINT || signal_number == SIGTERM) && flag != nullptr && *flag == 0) {
    unlink_registered();
    *flag = 1;
    return;
  }
  unlink_registered();
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

void remove_files_on_termination() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action = {};
    action.sa_handler = remove_and_end;
    sigemptyset(&action.sa_mask);
    for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) sigaction(signal_number, &action, nullptr);
  });
}

void stop_gracefully_on_interrupt(volatile std::sig_atomic_t* flag) {
  interrupt_flag.store(flag);
  remove_files_on_termination();
}

void remove_registered_files() {
  unlink_registered();
}

void register_removal(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  std::lock_guard lock(slots_mutex);
  for (Slot& slot : slots) {
    if (slot.used.load(std::memory_order_relaxed)) continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.used.store(true, std::memory_order_release);
    return;
  }
}

void unregister_removal(const std::string& path) {
  std::lock_guard lock(slots_mutex);
  for (Slot& slot : slots) {
    if (slot.used.load(std::memory_order_relaxed) && path == slot.path) {
      slot.used.store(false, std::memory_order_release);
      return;
    }
  }
}

}  // namespace zb
