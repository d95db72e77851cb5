// Where the tests find the project's files and the shardlm binary. The paths
// are compiled into one file (test_paths.cpp), so the other test objects hold
// no absolute path and a second checkout's build reuses them from ccache.
#pragma once

#include <string>

namespace shardlm::test_paths {

// models/: the project's test models and llama.cpp's golden outputs (models/README.md).
const char* models_dir();
// tests/chat/data: chat templates and their reference renderings.
const char* chat_data_dir();
// The text of a file there (empty if it cannot be read).
std::string chat_data(const std::string& name);
// The shardlm binary of this build.
const char* shardlm_binary();

// models/stories260K.gguf, the small real model most tests run.
inline const std::string kStoriesModel = std::string(models_dir()) + "/stories260K.gguf";

}  // namespace shardlm::test_paths
