// Files removed even when the process is ended by a signal. The NVMe store's files are deleted by their
// owners' destructors; but when one rank of an MPI job fails, the job is ended with MPI_Abort, which sends
// SIGTERM to the other ranks, and no destructor runs there. Files registered here are unlinked by a SIGTERM,
// SIGINT or SIGHUP handler (unlink is async-signal-safe), which then lets the signal end the process.
#pragma once

#include <csignal>
#include <string>

namespace zb {

// Installs the handlers (once; later calls do nothing).
void remove_files_on_termination();
// The files the handlers remove. At most 64 at a time; a path beyond that (or longer than 4095 bytes) is
// left to its owner's destructor alone.
void register_removal(const std::string& path);
void unregister_removal(const std::string& path);
// Removes the registered files now: for a process about to end the job itself (MPI_Abort) while their owners
// still hold them.
void remove_registered_files();
// For programs that stop gracefully on Ctrl-C (they finish writing what has finished): the first SIGINT or
// SIGTERM (mpirun turns a Ctrl-C into SIGTERM for its ranks) removes the registered files, whose open
// descriptors keep them usable, and sets *flag; a second one ends the process at once. Installs the handlers
// too. `flag` must outlive the process's handling of signals (a static).
void stop_gracefully_on_interrupt(volatile std::sig_atomic_t* flag);

}  // namespace zb
