// Starts Swagger UI on /docs. A file, not an inline script, so the page's Content-Security-Policy
// (script-src 'self') holds; the OpenAPI document's URL comes from the page (data-openapi-url).
"use strict";

window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
});
