// An unprivileged user (and optionally a group) made for one test and removed after it, for
// the findings where root matters: root must not be turned against the machine by what such
// a user plants. Where the machine cannot (not root, no useradd), ok() is false and why()
// says so; tests then skip that part with a message.
#pragma once

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/support/command.h"

namespace shardguard::testing {

class TemporaryUser {
 public:
  // `tag` keeps names of users made by different tests apart.
  explicit TemporaryUser(const std::string& tag) {
    name_ = "sgh" + tag + std::to_string(::getpid() % 100000);
    if (::geteuid() != 0 || ::access("/usr/sbin/useradd", X_OK) != 0) {
      why_ = "needs root and useradd to make an unprivileged user";
      return;
    }
    const auto r =
        run_command("useradd --system --no-create-home --shell /usr/sbin/nologin " + name_);
    if (r.exit_code != 0) {
      why_ = "useradd failed: " + r.err;
      return;
    }
    made_ = true;
    if (const passwd* pw = ::getpwnam(name_.c_str())) {
      uid_ = pw->pw_uid;
      gid_ = pw->pw_gid;
    }
    if (uid_ == 0) why_ = "useradd made no usable user";
  }
  ~TemporaryUser() {
    if (made_) (void)run_command("userdel " + name_);
    if (!group_.empty()) (void)run_command("groupdel " + group_);
  }
  TemporaryUser(const TemporaryUser&) = delete;
  TemporaryUser& operator=(const TemporaryUser&) = delete;

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

  // Makes a new group with this user in it; returns its gid (0 on failure).
  gid_t make_group() {
    group_ = name_ + "g";
    if (run_command("groupadd " + group_).exit_code != 0 ||
        run_command("gpasswd -a " + name_ + " " + group_).exit_code != 0)
      return 0;
    const group* g = ::getgrnam(group_.c_str());
    return g ? g->gr_gid : 0;
  }
  const std::string& group_name() const { return group_; }

  // A command line prefix that runs what follows as this user (its groups included).
  std::string as_user() const {
    return "/usr/bin/setpriv --reuid=" + std::to_string(uid_) + " --regid=" + std::to_string(gid_) +
           " --init-groups --inh-caps=-all -- ";
  }

 private:
  std::string name_, why_, group_;
  bool made_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// 'a'\''b': one shell word whatever `s` holds.
inline std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace shardguard::testing
