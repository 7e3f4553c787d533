#include "cli/secret_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "core/exit_codes.h"
#include "net/secret.h"

namespace shardguard::cli {

void add_secret_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("secret", "The shared secret that authenticates nodes of a job");
  cmd->require_subcommand(1);

  auto generate_path = std::make_shared<std::string>();
  auto* generate = cmd->add_subcommand(
      "generate", "Write a new random secret to FILE (mode 0600; an existing file is kept)");
  generate->add_option("FILE", *generate_path, "where to write it")->required();
  generate->callback([generate_path, exit_code] {
    if (auto st = net::generate_secret_file(*generate_path); !st.ok()) {
      std::fprintf(stderr, "shardguard secret generate: %s\n", st.error().message().c_str());
      *exit_code = kExitFailure;
      return;
    }
    std::printf("wrote a new secret to '%s' (mode 0600); give every node the same file\n",
                generate_path->c_str());
    *exit_code = kExitOk;
  });

  auto check_path = std::make_shared<std::string>();
  auto* check = cmd->add_subcommand(
      "check", "Check that FILE (or $SHARDGUARD_SECRET_FILE) would be accepted as the secret");
  check->add_option("FILE", *check_path, "the secret file");
  check->callback([check_path, exit_code] {
    auto path = net::resolve_secret_path(*check_path);
    auto secret = path.ok() ? net::load_secret_file(*path) : Result<net::Secret>(path.error());
    if (!secret.ok()) {
      std::fprintf(stderr, "shardguard secret check: %s\n", secret.error().message().c_str());
      *exit_code = kExitFailure;
      return;
    }
    std::printf("'%s': ok (%zu bytes of secret)\n", path->c_str(), secret->bytes().size());
    *exit_code = kExitOk;
  });
}

}  // namespace shardguard::cli
