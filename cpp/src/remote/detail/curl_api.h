// The few libcurl functions the HTTP engine calls, declared here and resolved with dlopen/dlsym at run time
// (like detail/cudart_api.h), so that chute builds without curl's headers and its wheel bundles no libcurl
// and no OpenSSL: every Linux distribution ships libcurl.so.4, and without it only remote URLs fail.
// The types, option numbers and constants are those of curl/curl.h and curl/multi.h (stable ABI since
// curl 7.x); curl_api_check.cc checks them against the real headers where those are installed.
// libcurl >= 7.75 is required: CURLOPT_AWS_SIGV4 (and curl_multi_poll / curl_multi_wakeup, 7.66 / 7.68).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chute::detail {

using CURL = void;
using CURLM = void;
using CURLcode = int;
using CURLMcode = int;
using CURLoption = int;
using CURLMoption = int;
using CURLINFO = int;
using curl_off_t = int64_t;

struct curl_slist {
  char* data;
  curl_slist* next;
};

struct CURLMsg {
  int msg;  // CURLMSG
  CURL* easy_handle;
  union {
    void* whatever;
    CURLcode result;
  } data;
};

// The leading fields of curl_version_info_data (the only ones read).
struct curl_version_info_data {
  int age;
  const char* version;
  unsigned int version_num;
};

using curl_write_callback = size_t (*)(char* buffer, size_t size, size_t nitems, void* userdata);

constexpr CURLcode CURLE_OK = 0;
constexpr CURLcode CURLE_UNSUPPORTED_PROTOCOL = 1;
constexpr CURLcode CURLE_URL_MALFORMAT = 3;
constexpr CURLcode CURLE_OUT_OF_MEMORY = 27;
constexpr CURLcode CURLE_TOO_MANY_REDIRECTS = 47;
constexpr CURLMcode CURLM_OK = 0;
constexpr int CURLMSG_DONE = 1;
constexpr long CURL_GLOBAL_ALL = 3;
constexpr int CURLVERSION_NOW = 10;  // CURLVERSION_ELEVENTH
constexpr size_t CURL_ERROR_SIZE = 256;

// Options: CURLOPTTYPE_LONG + n, OBJECTPOINT (= STRINGPOINT, SLISTPOINT, CBPOINT) 10000 + n,
// FUNCTIONPOINT 20000 + n, OFF_T 30000 + n.
constexpr CURLoption CURLOPT_WRITEDATA = 10001;
constexpr CURLoption CURLOPT_URL = 10002;
constexpr CURLoption CURLOPT_RANGE = 10007;
constexpr CURLoption CURLOPT_ERRORBUFFER = 10010;
constexpr CURLoption CURLOPT_WRITEFUNCTION = 20011;
constexpr CURLoption CURLOPT_POSTFIELDS = 10015;
constexpr CURLoption CURLOPT_LOW_SPEED_LIMIT = 19;
constexpr CURLoption CURLOPT_LOW_SPEED_TIME = 20;
constexpr CURLoption CURLOPT_HTTPHEADER = 10023;
constexpr CURLoption CURLOPT_HEADERDATA = 10029;
constexpr CURLoption CURLOPT_CUSTOMREQUEST = 10036;
constexpr CURLoption CURLOPT_NOBODY = 44;
constexpr CURLoption CURLOPT_HEADERFUNCTION = 20079;
constexpr CURLoption CURLOPT_BUFFERSIZE = 98;
constexpr CURLoption CURLOPT_NOSIGNAL = 99;
constexpr CURLoption CURLOPT_POSTFIELDSIZE_LARGE = 30120;
constexpr CURLoption CURLOPT_TIMEOUT_MS = 155;
constexpr CURLoption CURLOPT_CONNECTTIMEOUT_MS = 156;
constexpr CURLoption CURLOPT_USERNAME = 10173;
constexpr CURLoption CURLOPT_PASSWORD = 10174;
constexpr CURLoption CURLOPT_TCP_KEEPALIVE = 213;
constexpr CURLoption CURLOPT_AWS_SIGV4 = 10305;
constexpr CURLoption CURLOPT_FOLLOWLOCATION = 52;
constexpr CURLoption CURLOPT_MAXREDIRS = 68;
constexpr CURLoption CURLOPT_REDIR_PROTOCOLS = 182;  // (a bitmask; the _STR form needs libcurl 7.85)
constexpr long kCurlProtoHttp = 1 << 0;              // CURLPROTO_HTTP
constexpr long kCurlProtoHttps = 1 << 1;             // CURLPROTO_HTTPS

constexpr CURLINFO CURLINFO_RESPONSE_CODE = 0x200000 + 2;  // CURLINFO_LONG + 2

constexpr CURLMoption CURLMOPT_MAXCONNECTS = 6;
constexpr CURLMoption CURLMOPT_MAX_HOST_CONNECTIONS = 7;

constexpr unsigned kCurlMinVersion = 0x074b00;  // 7.75.0: CURLOPT_AWS_SIGV4

struct CurlApi {
  CURLcode (*curl_global_init)(long);
  curl_version_info_data* (*curl_version_info)(int);
  CURL* (*curl_easy_init)();
  void (*curl_easy_cleanup)(CURL*);
  CURLcode (*curl_easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*curl_easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*curl_easy_strerror)(CURLcode);
  curl_slist* (*curl_slist_append)(curl_slist*, const char*);
  void (*curl_slist_free_all)(curl_slist*);
  CURLM* (*curl_multi_init)();
  CURLMcode (*curl_multi_cleanup)(CURLM*);
  CURLMcode (*curl_multi_setopt)(CURLM*, CURLMoption, ...);
  CURLMcode (*curl_multi_add_handle)(CURLM*, CURL*);
  CURLMcode (*curl_multi_remove_handle)(CURLM*, CURL*);
  CURLMcode (*curl_multi_perform)(CURLM*, int*);
  CURLMcode (*curl_multi_poll)(CURLM*, struct curl_waitfd*, unsigned int, int, int*);
  CURLMcode (*curl_multi_wakeup)(CURLM*);
  CURLMsg* (*curl_multi_info_read)(CURLM*, int*);
  const char* (*curl_multi_strerror)(CURLMcode);

  std::string version;  // "7.88.1"
};

// The process-wide table: libcurl.so.4 ($CHUTE_LIBCURL first, when set) loaded once, its symbols resolved,
// its version checked and curl_global_init() called. nullptr when that fails, with the reason in *why
// ("libcurl.so.4: cannot open shared object file ..."); the next call tries again.
const CurlApi* curl_api(std::string* why = nullptr);

}  // namespace chute::detail
