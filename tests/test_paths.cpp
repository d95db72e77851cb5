#include "test_paths.h"

#include <fstream>
#include <sstream>

namespace shardlm::test_paths {

const char* models_dir() { return SHARDLM_TEST_MODELS_DIR; }
const char* chat_data_dir() { return SHARDLM_TEST_CHAT_DATA_DIR; }
const char* shardlm_binary() { return SHARDLM_TEST_BINARY; }

std::string chat_data(const std::string& name) {
  std::ifstream in(std::string(chat_data_dir()) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace shardlm::test_paths
