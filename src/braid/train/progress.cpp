#include "braid/train/progress.h"

#include <unistd.h>

#include <cmath>

namespace braid::train {

std::string format_eta(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(bool is_printer, bool launched, FILE* out)
    : printer_(is_printer),
      tty_(is_printer && !launched && isatty(fileno(out))),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

void Progress::header(const std::string& text) {
  message(text);
}

void Progress::message(const std::string& text) {
  if (!printer_) return;
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

void Progress::step(const StepStats& s, bool force_line) {
  if (!printer_) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double eta =
      s.step > 0 ? elapsed / static_cast<double>(s.step) * static_cast<double>(s.max_steps - s.step)
                 : -1;
  char buf[320];
  int n =
      std::snprintf(buf, sizeof buf,
                    "step %5lld/%lld | loss %.4f | lr %.3e | %s%.0f tok/s | MFU %.1f%% | "
                    "%.0f ms/step | ETA %s",
                    static_cast<long long>(s.step), static_cast<long long>(s.max_steps), s.loss,
                    s.lr, "", s.tokens_per_s, 100.0 * s.mfu, s.step_ms, format_eta(eta).c_str());
  if (s.grad_norm >= 0 && n > 0 && n < static_cast<int>(sizeof buf))
    n += std::snprintf(buf + n, sizeof buf - n, " | gnorm %.3f", s.grad_norm);
  if (s.bubble >= 0 && n > 0 && n < static_cast<int>(sizeof buf))
    n += std::snprintf(buf + n, sizeof buf - n, " | bubble %.1f%%", 100.0 * s.bubble);
  if (s.offload_read_bytes + s.offload_written_bytes > 0 && n > 0 &&
      n < static_cast<int>(sizeof buf))
    std::snprintf(buf + n, sizeof buf - n, " | offload read %.2f GB written %.2f GB busy %.0f ms",
                  static_cast<double>(s.offload_read_bytes) * 1e-9,
                  static_cast<double>(s.offload_written_bytes) * 1e-9, s.offload_busy_ms);
  if (tty_ && !force_line) {
    std::fprintf(out_, "\r\033[K%s", buf);
    line_open_ = true;
  } else {
    if (line_open_) std::fputc('\r', out_);
    std::fprintf(out_, "%s%s\n", tty_ ? "\033[K" : "", buf);
    line_open_ = false;
  }
  std::fflush(out_);
}

}  // namespace braid::train
