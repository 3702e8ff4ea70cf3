#include "braid/data/unicode_nfc.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "braid/core/error.h"

namespace braid::data {

namespace {
const icu::Normalizer2& nfc_instance() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  BRAID_CHECK(U_SUCCESS(status) && n != nullptr, "ICU: no NFC normalizer (", u_errorName(status),
              ")");
  return *n;
}
}  // namespace

bool is_nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return true;
  UErrorCode status = U_ZERO_ERROR;
  const bool yes = nfc_instance().isNormalizedUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), status);
  BRAID_CHECK(U_SUCCESS(status), "ICU: NFC check failed (", u_errorName(status), ")");
  return yes;
}

std::string nfc(std::string_view text) {
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  nfc_instance().normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())),
                               sink, nullptr, status);
  BRAID_CHECK(U_SUCCESS(status), "ICU: NFC normalisation failed (", u_errorName(status), ")");
  return out;
}

}  // namespace braid::data
