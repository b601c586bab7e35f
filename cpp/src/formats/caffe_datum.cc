#include "chute/formats/caffe_datum.h"

#include <string>

#include "formats/detail/proto_wire.h"

namespace chute {

using detail::ProtoField;
using detail::ProtoReader;
using detail::WireType;

Result<CaffeDatum> parse_datum(std::span<const uint8_t> value) {
  CaffeDatum d;
  ProtoReader r(value);
  ProtoField f;
  auto expect = [&](WireType type) -> Status {
    if (f.type == type) return Status::ok();
    return corrupt_data("not a Caffe Datum: field " + std::to_string(f.number) + " has wire type " +
                        std::to_string(static_cast<int>(f.type)));
  };
  // int32 fields are varints of the value sign-extended to 64 bits.
  auto int32 = [&] { return static_cast<int64_t>(static_cast<int32_t>(f.value)); };
  while (r.next(&f)) {
    switch (f.number) {
      case 1:
      case 2:
      case 3:
        CHUTE_RETURN_IF_ERROR(expect(WireType::kVarint));
        (f.number == 1 ? d.channels : f.number == 2 ? d.height : d.width) = int32();
        break;
      case 4:
        CHUTE_RETURN_IF_ERROR(expect(WireType::kLength));
        d.has_data = true;
        d.data = f.bytes;
        break;
      case 5:
        CHUTE_RETURN_IF_ERROR(expect(WireType::kVarint));
        d.has_label = true;
        d.label = int32();
        break;
      case 6:
        if (f.type == WireType::kFixed32) {
          ++d.float_data;
        } else {
          CHUTE_RETURN_IF_ERROR(expect(WireType::kLength));  // packed
          d.float_data += f.bytes.size() / 4;
        }
        break;
      case 7:
        CHUTE_RETURN_IF_ERROR(expect(WireType::kVarint));
        d.encoded = f.value != 0;
        break;
      default:
        return corrupt_data("not a Caffe Datum: it has field " + std::to_string(f.number));
    }
  }
  if (r.failed()) return corrupt_data("not a Caffe Datum: " + r.error());
  return d;
}

}  // namespace chute
