#include "test_paths.h"

namespace shardlm::test_paths {

const char* models_dir() { return SHARDLM_TEST_MODELS_DIR; }
const char* chat_data_dir() { return SHARDLM_TEST_CHAT_DATA_DIR; }
const char* shardlm_binary() { return SHARDLM_TEST_BINARY; }

}  // namespace shardlm::test_paths
