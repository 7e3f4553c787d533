#include "agent/embedded_agent.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include "agent/aws_source.h"
#include "agent/azure_source.h"
#include "agent/cloud_detect.h"
#include "agent/cloud_identify.h"
#include "agent/gcp_source.h"
#include "agent/signal_source.h"
#include "io/http_client.h"

namespace shardguard::agent {

struct EmbeddedAgent::Impl {
  io::Deps d;
  AgentSettings settings;
  Duration default_grace;
  std::vector<std::unique_ptr<NoticeSource>> sources;
  NoticeSource::Callback on_notice;

  RandomFn random() { return d.random.as_function(); }

  void add(std::unique_ptr<NoticeSource> s) {
    s->start(on_notice);
    sources.push_back(std::move(s));
  }

  void start_clouds(bool aws, bool gcp, bool azure, const std::string& azure_vm) {
    const auto& st = settings;
    if (aws) {
      AwsSourceConfig c;
      if (!st.aws_url.empty()) c.base_url = st.aws_url;
      if (st.poll_interval.count() > 0) c.poll_interval = st.poll_interval;
      add(std::make_unique<AwsSource>(c, d.http, d.clock, d.timers, random()));
    }
    if (gcp) {
      GcpSourceConfig c;
      if (!st.gcp_url.empty()) c.base_url = st.gcp_url;
      add(std::make_unique<GcpSource>(c, d.http, d.clock, d.timers, random()));
    }
    if (azure) {
      AzureSourceConfig c;
      if (!st.azure_url.empty()) c.base_url = st.azure_url;
      c.vm_name = st.azure_vm_name.empty() ? azure_vm : st.azure_vm_name;
      if (st.poll_interval.count() > 0) c.poll_interval = st.poll_interval;
      add(std::make_unique<AzureSource>(c, d.http, d.clock, d.timers, random()));
    }
    for (const auto& s : sources) spdlog::info("agent: watching {}", s->name());
  }
};

EmbeddedAgent::EmbeddedAgent(const io::Deps& deps, AgentSettings settings, Duration default_grace)
    : impl_(new Impl{deps, std::move(settings), default_grace, {}, {}}) {}

EmbeddedAgent::~EmbeddedAgent() { stop(); }

Status EmbeddedAgent::start(NoticeSource::Callback on_notice) {
  Impl& m = *impl_;
  m.on_notice = std::move(on_notice);
  SG_ASSIGN_OR_RETURN(CloudMode mode, parse_cloud_mode(m.settings.clouds));
  SignalSourceConfig sig;
  sig.signals = {{SIGTERM, m.default_grace}, {SIGINT, m.default_grace}};
  for (int s : m.settings.notice_signals) sig.signals.push_back({s, m.settings.signal_grace});
  m.add(std::make_unique<SignalSource>(sig, m.d.loop, m.d.clock));

  switch (mode) {
    case CloudMode::kNone: break;
    case CloudMode::kAws: m.start_clouds(true, false, false, ""); break;
    case CloudMode::kGcp: m.start_clouds(false, true, false, ""); break;
    case CloudMode::kAzure: m.start_clouds(false, false, true, ""); break;
    case CloudMode::kAuto: {
      // The machine's own DMI data says which cloud it is; no network is asked for that.
      const std::string dir =
          m.settings.dmi_dir.empty() ? dmi_default_dir() : m.settings.dmi_dir;
      const CloudIdentity id = identify_cloud(read_dmi(m.d.fs, dir), dir);
      if (id.cloud) {
        spdlog::info("agent: this machine is on {} ({}): watching its notices",
                     cloud_mode_name(*id.cloud), id.evidence);
        m.start_clouds(id.cloud == CloudMode::kAws, id.cloud == CloudMode::kGcp,
                       id.cloud == CloudMode::kAzure, "");
        break;
      }
      // A metadata URL set by hand (an emulator, a proxy) is probed as before.
      CloudDetectOptions o;
      o.probe_aws = !m.settings.aws_url.empty();
      o.probe_gcp = !m.settings.gcp_url.empty();
      o.probe_azure = !m.settings.azure_url.empty();
      if (!o.probe_aws && !o.probe_gcp && !o.probe_azure) {
        spdlog::info("agent: no cloud by this machine's DMI data ({}): no metadata service is "
                     "asked; [agent] clouds names one if this is wrong", id.evidence);
        break;
      }
      if (o.probe_aws) o.aws_base_url = m.settings.aws_url;
      if (o.probe_gcp) o.gcp_base_url = m.settings.gcp_url;
      if (o.probe_azure) o.azure_base_url = m.settings.azure_url;
      Impl* p = impl_.get();
      detect_clouds(m.d.http, o, [p](CloudDetection d) {
        for (const auto& note : d.notes) spdlog::info("agent: cloud detection: {}", note);
        if (!d.any()) spdlog::info("agent: no cloud metadata service found at the URLs given");
        p->start_clouds(d.aws, d.gcp, d.azure, d.azure_vm_name);
      });
      break;
    }
  }
  return {};
}

void EmbeddedAgent::stop() {
  if (!impl_) return;
  for (auto& s : impl_->sources) s->stop();
}

void EmbeddedAgent::acknowledge(const Notice& notice) {
  for (auto& s : impl_->sources)
    if (s->name() == notice.source) s->acknowledge(notice);
}

std::vector<std::string> EmbeddedAgent::source_names() const {
  std::vector<std::string> out;
  for (const auto& s : impl_->sources) out.emplace_back(s->name());
  return out;
}

}  // namespace shardguard::agent
