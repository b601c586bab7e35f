// Compile-time check, built only where curl's headers are found (libcurl4-openssl-dev): the declarations
// chute writes itself in detail/curl_api.h (to dlopen libcurl without its headers) have curl's signatures,
// option numbers, constants and struct layouts. Enums count as int and pointers to structs as void*, which
// is how they are passed (x86-64 and aarch64 ABIs). Nothing here runs.
#include <curl/curl.h>

#include <cstddef>
#include <type_traits>

// Macros in curl.h: take their values, then let detail/curl_api.h use the names.
constexpr long kRealGlobalAll = CURL_GLOBAL_ALL;
constexpr int kRealVersionNow = CURLVERSION_NOW;
constexpr size_t kRealErrorSize = CURL_ERROR_SIZE;
constexpr unsigned kRealVersionNum = LIBCURL_VERSION_NUM;
#undef CURL_GLOBAL_ALL
#undef CURLVERSION_NOW
#undef CURL_ERROR_SIZE
// curl.h's type-checking macros (gcc) wrap these names; the functions themselves are what is compared.
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt

#include "base/detail/signature_check.h"
#include "remote/detail/curl_api.h"

namespace {
namespace d = chute::detail;
using chute::detail::abi::sig_t;

#define CHUTE_CHECK_SIGNATURE(name)                                                          \
  static_assert(std::is_same_v<sig_t<decltype(&::name)>, sig_t<decltype(d::CurlApi::name)>>, \
                "detail/curl_api.h: " #name " differs from curl/curl.h")

CHUTE_CHECK_SIGNATURE(curl_global_init);
CHUTE_CHECK_SIGNATURE(curl_version_info);
CHUTE_CHECK_SIGNATURE(curl_easy_init);
CHUTE_CHECK_SIGNATURE(curl_easy_cleanup);
CHUTE_CHECK_SIGNATURE(curl_easy_setopt);
CHUTE_CHECK_SIGNATURE(curl_easy_getinfo);
CHUTE_CHECK_SIGNATURE(curl_easy_strerror);
CHUTE_CHECK_SIGNATURE(curl_slist_append);
CHUTE_CHECK_SIGNATURE(curl_slist_free_all);
CHUTE_CHECK_SIGNATURE(curl_multi_init);
CHUTE_CHECK_SIGNATURE(curl_multi_cleanup);
CHUTE_CHECK_SIGNATURE(curl_multi_setopt);
CHUTE_CHECK_SIGNATURE(curl_multi_add_handle);
CHUTE_CHECK_SIGNATURE(curl_multi_remove_handle);
CHUTE_CHECK_SIGNATURE(curl_multi_perform);
CHUTE_CHECK_SIGNATURE(curl_multi_poll);
CHUTE_CHECK_SIGNATURE(curl_multi_wakeup);
CHUTE_CHECK_SIGNATURE(curl_multi_info_read);
CHUTE_CHECK_SIGNATURE(curl_multi_strerror);

static_assert(std::is_same_v<::curl_write_callback, d::curl_write_callback>);
static_assert(sizeof(::CURLcode) == sizeof(d::CURLcode) && sizeof(::CURLoption) == sizeof(d::CURLoption));
static_assert(sizeof(::curl_off_t) == sizeof(d::curl_off_t));

// Struct layouts.
static_assert(sizeof(::curl_slist) == sizeof(d::curl_slist));
static_assert(offsetof(::curl_slist, data) == offsetof(d::curl_slist, data));
static_assert(offsetof(::curl_slist, next) == offsetof(d::curl_slist, next));
static_assert(sizeof(::CURLMsg) == sizeof(d::CURLMsg));
static_assert(offsetof(::CURLMsg, msg) == offsetof(d::CURLMsg, msg));
static_assert(offsetof(::CURLMsg, easy_handle) == offsetof(d::CURLMsg, easy_handle));
static_assert(offsetof(::CURLMsg, data) == offsetof(d::CURLMsg, data));
static_assert(offsetof(::curl_version_info_data, age) == offsetof(d::curl_version_info_data, age));
static_assert(offsetof(::curl_version_info_data, version) == offsetof(d::curl_version_info_data, version));
static_assert(offsetof(::curl_version_info_data, version_num) == offsetof(d::curl_version_info_data, version_num));

// Constants.
static_assert(::CURLE_OK == d::CURLE_OK);
static_assert(::CURLE_UNSUPPORTED_PROTOCOL == d::CURLE_UNSUPPORTED_PROTOCOL);
static_assert(::CURLE_URL_MALFORMAT == d::CURLE_URL_MALFORMAT);
static_assert(::CURLE_OUT_OF_MEMORY == d::CURLE_OUT_OF_MEMORY);
static_assert(::CURLE_TOO_MANY_REDIRECTS == d::CURLE_TOO_MANY_REDIRECTS);
static_assert(::CURLM_OK == d::CURLM_OK);
static_assert(::CURLMSG_DONE == d::CURLMSG_DONE);
static_assert(kRealGlobalAll == d::CURL_GLOBAL_ALL);
static_assert(kRealVersionNow == d::CURLVERSION_NOW);
static_assert(kRealErrorSize == d::CURL_ERROR_SIZE);
static_assert(kRealVersionNum >= d::kCurlMinVersion, "these headers are older than the libcurl chute needs");

#define CHUTE_CHECK_OPTION(name) \
  static_assert(::name == d::name, "detail/curl_api.h: " #name " differs from curl/curl.h")
CHUTE_CHECK_OPTION(CURLOPT_WRITEDATA);
CHUTE_CHECK_OPTION(CURLOPT_URL);
CHUTE_CHECK_OPTION(CURLOPT_RANGE);
CHUTE_CHECK_OPTION(CURLOPT_ERRORBUFFER);
CHUTE_CHECK_OPTION(CURLOPT_WRITEFUNCTION);
CHUTE_CHECK_OPTION(CURLOPT_POSTFIELDS);
CHUTE_CHECK_OPTION(CURLOPT_LOW_SPEED_LIMIT);
CHUTE_CHECK_OPTION(CURLOPT_LOW_SPEED_TIME);
CHUTE_CHECK_OPTION(CURLOPT_HTTPHEADER);
CHUTE_CHECK_OPTION(CURLOPT_HEADERDATA);
CHUTE_CHECK_OPTION(CURLOPT_CUSTOMREQUEST);
CHUTE_CHECK_OPTION(CURLOPT_NOBODY);
CHUTE_CHECK_OPTION(CURLOPT_HEADERFUNCTION);
CHUTE_CHECK_OPTION(CURLOPT_BUFFERSIZE);
CHUTE_CHECK_OPTION(CURLOPT_NOSIGNAL);
CHUTE_CHECK_OPTION(CURLOPT_POSTFIELDSIZE_LARGE);
CHUTE_CHECK_OPTION(CURLOPT_TIMEOUT_MS);
CHUTE_CHECK_OPTION(CURLOPT_CONNECTTIMEOUT_MS);
CHUTE_CHECK_OPTION(CURLOPT_USERNAME);
CHUTE_CHECK_OPTION(CURLOPT_PASSWORD);
CHUTE_CHECK_OPTION(CURLOPT_TCP_KEEPALIVE);
CHUTE_CHECK_OPTION(CURLOPT_AWS_SIGV4);
CHUTE_CHECK_OPTION(CURLOPT_FOLLOWLOCATION);
CHUTE_CHECK_OPTION(CURLOPT_MAXREDIRS);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // deprecated for the _STR form (7.85), still served
CHUTE_CHECK_OPTION(CURLOPT_REDIR_PROTOCOLS);
#pragma GCC diagnostic pop
static_assert(CURLPROTO_HTTP == d::kCurlProtoHttp && CURLPROTO_HTTPS == d::kCurlProtoHttps);
CHUTE_CHECK_OPTION(CURLINFO_RESPONSE_CODE);
CHUTE_CHECK_OPTION(CURLMOPT_MAXCONNECTS);
CHUTE_CHECK_OPTION(CURLMOPT_MAX_HOST_CONNECTIONS);

}  // namespace
