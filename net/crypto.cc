#include "net/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <utility>
#include <vector>

namespace shardguard::net {
namespace {

// "what: <OpenSSL's reason>" for the error at the top of this thread's OpenSSL error queue.
Error openssl_error(std::string_view what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  std::string message(what);
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    message += ": ";
    message += buf;
  }
  return Error(ErrorCode::kInternal, std::move(message));
}

// Fetched once: fetching an algorithm is a provider lookup with locks, too slow per frame.
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

EVP_KDF* hkdf_algorithm() {
  static EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  return kdf;
}

}  // namespace

Status random_bytes(std::span<uint8_t> out) {
  if (out.empty()) return ok_status();
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    return openssl_error("RAND_bytes");
  }
  return ok_status();
}

Result<std::string> random_hex(size_t bytes) {
  std::vector<uint8_t> raw(bytes);
  SG_RETURN_IF_ERROR(random_bytes(raw));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (uint8_t b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Result<Nonce> random_nonce() {
  Nonce nonce{};
  SG_RETURN_IF_ERROR(random_bytes(nonce));
  return nonce;
}

Result<Key> hkdf_sha256(std::span<const uint8_t> ikm, std::string_view salt,
                        std::string_view info) {
  EVP_KDF* kdf = hkdf_algorithm();
  if (kdf == nullptr) return openssl_error("HKDF-SHA256: fetch HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  if (ctx == nullptr) return openssl_error("HKDF-SHA256: new context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(ikm.data()),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end(),
  };
  Key key{};
  const int ok = EVP_KDF_derive(ctx, key.data(), key.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return openssl_error("HKDF-SHA256: derive");
  return key;
}

bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

void wipe(void* p, size_t n) {
  if (p != nullptr && n > 0) OPENSSL_cleanse(p, n);
}

Result<HmacSha256> HmacSha256::create(std::span<const uint8_t> key) {
  EVP_MAC* mac = hmac_algorithm();
  if (mac == nullptr) return openssl_error("HMAC-SHA256: fetch HMAC");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (ctx == nullptr) return openssl_error("HMAC-SHA256: new context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  if (EVP_MAC_init(ctx, key.data(), key.size(), params) != 1) {
    EVP_MAC_CTX_free(ctx);
    return openssl_error("HMAC-SHA256: set key");
  }
  return HmacSha256(ctx);
}

HmacSha256::HmacSha256(HmacSha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}

HmacSha256& HmacSha256::operator=(HmacSha256&& other) noexcept {
  if (this != &other) {
    EVP_MAC_CTX_free(ctx_);
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

HmacSha256::~HmacSha256() { EVP_MAC_CTX_free(ctx_); }

Result<Mac> HmacSha256::compute(std::initializer_list<std::string_view> parts) {
  if (ctx_ == nullptr) return Error(ErrorCode::kInternal, "HMAC-SHA256: moved-from context");
  // A null key re-initialises the context with the key given at create().
  if (EVP_MAC_init(ctx_, nullptr, 0, nullptr) != 1) return openssl_error("HMAC-SHA256: init");
  for (std::string_view part : parts) {
    if (!part.empty() && EVP_MAC_update(ctx_, reinterpret_cast<const unsigned char*>(part.data()),
                                        part.size()) != 1) {
      return openssl_error("HMAC-SHA256: update");
    }
  }
  Mac out{};
  size_t len = 0;
  if (EVP_MAC_final(ctx_, out.data(), &len, out.size()) != 1 || len != out.size()) {
    return openssl_error("HMAC-SHA256: final");
  }
  return out;
}

Result<Mac> hmac_sha256(std::span<const uint8_t> key,
                        std::initializer_list<std::string_view> parts) {
  SG_ASSIGN_OR_RETURN(HmacSha256 mac, HmacSha256::create(key));
  return mac.compute(parts);
}

}  // namespace shardguard::net
