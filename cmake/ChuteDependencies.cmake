# The system libraries chute builds against, found once, each with an error that names the package to
# install when it is missing (CMake's own "Could NOT find JPEG" names none).
#
# Adding one: bench/gpu_check.sh builds on a machine without development packages, against the Debian packages
# scripts/fetch_gpu_debs.sh fetches, with explicit paths into them; add the new library's packages and paths there,
# and run scripts/gpu_dry_run.sh, which hides every other development file and fails until both are done
# (docs/GPU.md).
#
# chute_find_dependency(<name> <debian/ubuntu package> <fedora package> <find command...>)
#   runs the find command, then stops with a message naming both packages if <name>_FOUND is false.
function(chute_missing_dependency what debian fedora)
  message(FATAL_ERROR
    "chute needs ${what}, which was not found.\n"
    "  Debian/Ubuntu: apt-get install ${debian}\n"
    "  Fedora/RHEL:   dnf install ${fedora}\n"
    "Or point CMake at an installed copy with -DCMAKE_PREFIX_PATH=<prefix> "
    "(pip: --config-settings=cmake.define.CMAKE_PREFIX_PATH=<prefix>).")
endfunction()

# libjpeg-turbo: JPEG decode with crop-on-decode and scaled IDCT.
find_package(JPEG)
if(NOT JPEG_FOUND)
  chute_missing_dependency("libjpeg-turbo (headers and library)" libjpeg62-turbo-dev libjpeg-turbo-devel)
endif()

# libpng (and zlib through it): PNG decode.
find_package(PNG)
if(NOT PNG_FOUND)
  chute_missing_dependency("libpng (headers and library)" libpng-dev libpng-devel)
endif()

# libwebp: WebP decode (the library only; no demux/mux: animated WebP is refused).
find_path(WEBP_INCLUDE_DIR webp/decode.h DOC "libwebp headers")
find_library(WEBP_LIBRARY NAMES webp DOC "libwebp")
if(NOT WEBP_INCLUDE_DIR OR NOT WEBP_LIBRARY)
  chute_missing_dependency("libwebp (headers and library)" libwebp-dev libwebp-devel)
endif()

# xxHash: record and index checksums. Header-only use (XXH_INLINE_ALL), so the library and the wheel
# carry no run-time dependency on libxxhash.
find_path(XXHASH_INCLUDE_DIR xxhash.h DOC "xxHash header")
if(NOT XXHASH_INCLUDE_DIR)
  chute_missing_dependency("the xxHash header (xxhash.h)" libxxhash-dev xxhash-devel)
endif()

# zstd: compression of the raw-pixel records of packed datasets (`chute pack --raw`). Linked; the wheel
# bundles libzstd.so.1 like the image libraries.
find_path(ZSTD_INCLUDE_DIR zstd.h DOC "zstd header")
find_library(ZSTD_LIBRARY NAMES zstd DOC "libzstd")
if(NOT ZSTD_INCLUDE_DIR OR NOT ZSTD_LIBRARY)
  chute_missing_dependency("zstd (headers and library)" libzstd-dev libzstd-devel)
endif()

find_package(Threads REQUIRED)
