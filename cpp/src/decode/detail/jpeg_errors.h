// The libjpeg error manager every libjpeg handle in chute gets (the decoder's, decode/jpeg_decoder.cc, and the
// packer's encoder's, pack/jpeg_encoder.cc). libjpeg's own calls exit() on an error and prints warnings to
// stderr; this one formats the message and longjmps back to the caller, and prints nothing.
//
// The jump lands on a setjmp(jump) that the function making the libjpeg calls writes itself (a helper that
// called setjmp and returned would leave nothing to jump back to). No C++ object with a destructor lives
// between that setjmp and the libjpeg calls that may jump. A handle whose owner needs more (the decoder
// counts warnings) keeps a JpegErrors as the first member of its own manager and sets its own callbacks.
#pragma once

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstdio>
#include <string>

#include <jerror.h>
#include <jpeglib.h>

#include "chute/base/environment.h"
#include "chute/base/status.h"

namespace chute::detail {

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg's cinfo->err points here, and of() casts it back
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];

  // Points a compress or decompress handle at this manager; before jpeg_create_compress/decompress.
  template <class CInfo>
  void install(CInfo& cinfo) {
    cinfo.err = jpeg_std_error(&pub);
    pub.error_exit = exit_to_caller;
    pub.output_message = print_nothing;
  }

  // The manager of a handle that install() set up (or of a manager that starts with a JpegErrors).
  static JpegErrors& of(j_common_ptr cinfo) { return *reinterpret_cast<JpegErrors*>(cinfo->err); }

  // libjpeg's error_exit: the message into `message`, then back to the caller's setjmp.
  [[noreturn]] static void exit_to_caller(j_common_ptr cinfo) {
    JpegErrors& err = of(cinfo);
    (*cinfo->err->format_message)(cinfo, err.message);
    std::longjmp(err.jump, 1);
  }

  static void print_nothing(j_common_ptr) {}

  // Whether the error was libjpeg's own allocation failing: the machine's limit, not the image's fault.
  bool out_of_memory() const { return pub.msg_code == JERR_OUT_OF_MEMORY; }

  // The error that made libjpeg jump: kEnvironment when out of memory, else `data_error(message)` (what the
  // caller calls a bad input: a corrupt file for the decoder, an image it cannot encode for the encoder).
  template <class DataError>
  Status status(DataError data_error) const {
    if (out_of_memory()) return chute::out_of_memory(std::string("in libjpeg: ") + message);
    return data_error(std::string(message));
  }
};

}  // namespace chute::detail
