#include "runtime/wal.hpp"

#include "runtime/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace dls::runtime {

namespace {

constexpr std::string_view magic{"DLSWAL1\n", 8};
constexpr std::size_t frame_bytes = 8;  // length + crc32

std::uint32_t crc_of(std::string_view payload) {
  return static_cast<std::uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::runtime_error io_error(const std::string& what, const std::string& path) {
  return std::runtime_error("write-ahead log " + path + ": " + what + ": " + std::strerror(errno));
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    auto n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("write failed", path);
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void sync_dir_of(const std::string& path) {
  auto dir = std::filesystem::path(path).parent_path();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename itself succeeded; a directory we cannot open cannot be synced
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string_view wal_magic() { return magic; }

std::string frame_wal_record(std::string_view payload) {
  std::string out;
  out.reserve(frame_bytes + payload.size());
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  put_u32(out, crc_of(payload));
  out.append(payload);
  return out;
}

wal_scan parse_wal(std::string_view image) {
  wal_scan out;
  if (image.empty()) return out;
  if (image.size() < magic.size() || image.substr(0, magic.size()) != magic) {
    out.problem = "no log header";
    return out;
  }
  std::size_t at = magic.size();
  out.good_bytes = at;
  while (at < image.size()) {
    if (image.size() - at < frame_bytes) {
      out.problem = "torn record header at byte " + std::to_string(at);
      return out;
    }
    auto len = get_u32(image.data() + at);
    auto crc = get_u32(image.data() + at + 4);
    if (len > wal_max_record_bytes) {
      out.problem = "record length " + std::to_string(len) + " at byte " + std::to_string(at) + " is over the limit";
      return out;
    }
    if (image.size() - at - frame_bytes < len) {
      out.problem = "torn record at byte " + std::to_string(at) + " (" + std::to_string(len) + " bytes announced, " +
                    std::to_string(image.size() - at - frame_bytes) + " present)";
      return out;
    }
    auto payload = image.substr(at + frame_bytes, len);
    if (crc_of(payload) != crc) {
      out.problem = "checksum mismatch in the record at byte " + std::to_string(at);
      return out;
    }
    out.records.emplace_back(payload);
    at += frame_bytes + len;
    out.good_bytes = at;
  }
  return out;
}

wal_file::wal_file(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw io_error("cannot open", path_);
  std::string image;
  char buf[1 << 16];
  for (;;) {
    auto n = ::read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      auto e = io_error("cannot read", path_);
      ::close(fd_);
      throw e;
    }
    if (n == 0) break;
    image.append(buf, static_cast<std::size_t>(n));
  }
  auto scan = parse_wal(image);
  recovered_ = std::move(scan.records);
  if (image.empty() || scan.good_bytes == 0) {
    // A new log, or a file that is not one: start it over with the header.
    if (!image.empty())
      log_line("wal", "warning: " + path_ + ": " + scan.problem + "; starting an empty log");
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) < 0) throw io_error("cannot reset", path_);
    write_all(fd_, magic, path_);
    if (::fdatasync(fd_) != 0) throw io_error("cannot sync", path_);
    size_ = magic.size();
    return;
  }
  if (!scan.problem.empty()) {
    log_line("wal", "warning: " + path_ + ": " + scan.problem + "; dropped the last " +
                        std::to_string(image.size() - scan.good_bytes) + " bytes, kept " +
                        std::to_string(recovered_.size()) + " records");
    if (::ftruncate(fd_, static_cast<off_t>(scan.good_bytes)) != 0) throw io_error("cannot truncate", path_);
    if (::fdatasync(fd_) != 0) throw io_error("cannot sync", path_);
  }
  size_ = scan.good_bytes;
  if (::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) < 0) throw io_error("cannot seek", path_);
}

wal_file::~wal_file() {
  if (fd_ >= 0) {
    if (dirty_) ::fdatasync(fd_);
    ::close(fd_);
  }
}

void wal_file::append(std::string_view payload, bool sync_now) {
  if (payload.size() > wal_max_record_bytes)
    throw std::runtime_error("write-ahead log " + path_ + ": a record of " + std::to_string(payload.size()) +
                             " bytes is over the limit");
  auto framed = frame_wal_record(payload);
  write_all(fd_, framed, path_);
  size_ += framed.size();
  dirty_ = true;
  if (sync_now) sync();
}

void wal_file::sync() {
  // Cleared before the sync, so that an append landing during it marks the log dirty again.
  if (!dirty_.exchange(false)) return;
  if (::fdatasync(fd_) != 0) {
    dirty_ = true;
    throw io_error("cannot sync", path_);
  }
}

void wal_file::rewrite(const std::vector<std::string>& records) {
  auto tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw io_error("cannot open", tmp);
  std::string image(magic);
  for (const auto& r : records) image += frame_wal_record(r);
  try {
    write_all(fd, image, tmp);
    if (::fdatasync(fd) != 0) throw io_error("cannot sync", tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    auto e = io_error("cannot rename " + tmp + " over it", path_);
    ::close(fd);
    throw e;
  }
  sync_dir_of(path_);
  ::close(fd_);
  fd_ = fd;
  size_ = image.size();
  dirty_ = false;
  if (::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) < 0) throw io_error("cannot seek", path_);
}

}  // namespace dls::runtime
