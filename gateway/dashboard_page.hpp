#pragma once
// The /dashboard page (gateway/dashboard/dashboard.html), embedded at build time.
namespace dls::gateway {

const char* dashboard_html();

}  // namespace dls::gateway
