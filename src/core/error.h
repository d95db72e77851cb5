// One error type for everything a user can cause (bad file, bad flag, bad
// peer). The message is one line naming what is wrong and where.
#pragma once

#include <stdexcept>
#include <string>

namespace shardlm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error that every process of a job reaches the same way (MPI ranks that
// agreed on their inputs), printed by one of them: the others exit with the
// same status without a line of their own.
class ReportedElsewhere : public Error {
 public:
  ReportedElsewhere(const std::string& what, int exit_status) : Error(what), exit_status_(exit_status) {}
  int exit_status() const { return exit_status_; }

 private:
  int exit_status_;
};

}  // namespace shardlm
