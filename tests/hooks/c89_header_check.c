/* Compiled as C89 with -pedantic: shardguard.h must stay plain C. */
#include "shardguard.h"

int c89_header_api_version(void);

int c89_header_api_version(void) {
  sg_status status = SG_OK;
  sg_client* client = 0;
  sg_reader* reader = 0;
  sg_writer* writer = 0;
  (void)client;
  (void)reader;
  (void)writer;
  return (int)status + SHARDGUARD_API_VERSION;
}
