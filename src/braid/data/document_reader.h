// DocumentReader: the documents of one prepare-data input file, in file order, streamed.
//
//   *.jsonl (also .jsonl.gz, .jsonl.zst)  one JSON object per line; the document is its string
//                                         field `field` ("text" unless --field says; "": the
//                                         whole line, unparsed). Lines of nothing but
//                                         whitespace are skipped.
//   anything else (.txt, .txt.gz, ...)    the whole file is one document.
//
// Contract: next() gives the documents one at a time and holds one line (JSONL) or one
// document (text) in memory, never the whole file. A line that is not JSON, not an object,
// lacks the field or holds something other than a string there throws an Error naming
// path:line and what is wrong; decompression errors name the file (InputFile). count() is the
// number of documents next() will give, found without parsing (JSONL: lines that are not
// blank), for the validation split prepare-data must place before it reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "braid/data/input_file.h"

namespace braid::data {

enum class DocumentFormat { text, jsonl };

// By name, after any compression extension: ".jsonl" is JSONL, anything else text.
DocumentFormat document_format_of(std::string_view path);

class DocumentReader {
 public:
  DocumentReader(const std::string& path, std::string field);

  // The next document into text (replacing what was there); false after the last.
  bool next(std::string& text);
  // How many documents next() gives for path (opens and, for JSONL, reads the file).
  static int64_t count(const std::string& path);

  // 1-based line of the document next() gave last (JSONL); 0 for a text file.
  int64_t line() const { return line_; }
  // Where the document begins, for error messages: "path:line" or "path".
  std::string where() const;
  int64_t file_bytes_read() const { return file_.file_bytes_read(); }

 private:
  bool next_line(std::string_view& line);  // false at the end of the file

  InputFile file_;
  DocumentFormat format_;
  std::string field_;
  bool text_done_ = false;
  std::string buf_;  // decompressed bytes; [pos_, buf_.size()) not yet consumed
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_ = 0;
};

}  // namespace braid::data
