#include "common/step_log.hpp"

#include <filesystem>
#include <stdexcept>

namespace dls {

const char* step_log::header() {
  return "run,start_s,wall_s,engine_s,predicted_s,batch,refreshes,ran_refreshes,query_rows,key_rows,active,waiting";
}

step_log::step_log(const std::string& path, int flush_every) : flush_every_(flush_every < 1 ? 1 : flush_every) {
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error("cannot open the step log " + path);
  out_.precision(17);
  if (fresh) out_ << header() << '\n';
}

step_log::~step_log() { out_.flush(); }

void step_log::append(const step_record& r) {
  out_ << r.run << ',' << r.start_s << ',' << r.wall_s << ',' << r.engine_s << ',' << r.predicted_s << ','
       << r.batch << ',' << r.refreshes << ',' << r.ran_refreshes << ',' << r.query_rows << ',' << r.key_rows << ',' << r.active << ','
       << r.waiting << '\n';
  if (++pending_ >= flush_every_) {
    out_.flush();
    pending_ = 0;
  }
}

}  // namespace dls
