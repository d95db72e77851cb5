// A request the client got wrong, with the HTTP status and the field it names:
// the server turns it into an OpenAI-style error object.
#pragma once

#include <string>

#include "core/error.h"

namespace shardlm::serve {

class RequestError : public Error {
 public:
  RequestError(int status, std::string message, std::string param = {})
      : Error(std::move(message)), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // the offending field, "" if none

 private:
  int status_;
  std::string param_;
};

}  // namespace shardlm::serve
